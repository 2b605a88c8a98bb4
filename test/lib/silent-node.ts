/**
 * A "Kafka node" that accepts TCP connections on 127.0.0.1 and never answers a request: what a
 * stopped (SIGSTOP), cut-off or overloaded broker looks like to a client whose connect still
 * succeeds. For tests of the bounds on waits for the cluster.
 */
import net from 'node:net';
import type { AddressInfo } from 'node:net';

/** A listening silent node: `broker` is its host:port; close() drops every connection. */
export interface SilentNode {
  broker: string;
  close(): void;
}

/** Starts a silent node on a free port. */
export async function silentNode(): Promise<SilentNode> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => undefined);
    s.resume();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    broker: `127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}
