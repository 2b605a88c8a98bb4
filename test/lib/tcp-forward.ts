/**
 * A TCP forwarder run as its own process (inside a network namespace, see netns.ts):
 * `node tcp-forward.js <listenHost> <listenPort> <targetHost> <targetPort>` accepts connections
 * on listenHost:listenPort and pipes each, both ways, to a new connection to
 * targetHost:targetPort. Prints `listening` once bound; a connection whose other side fails is
 * destroyed (so the client sees the failure, as it would without the forwarder). In this
 * process, `delayMs` (read for every chunk) holds each chunk back that long, in order per
 * direction: the delay a slow link adds, for kernels without `sch_netem`.
 */
import net from 'node:net';

/** Copies `from` to `to`, each chunk `delayMs()` later than it came, never reordered. */
function pipeDelayed(from: net.Socket, to: net.Socket, delayMs: () => number): void {
  let lastDue = 0;
  from.on('data', (chunk) => {
    const d = delayMs();
    if (d <= 0 && lastDue <= Date.now()) {
      to.write(chunk);
      return;
    }
    const due = Math.max(Date.now() + d, lastDue);
    lastDue = due;
    setTimeout(() => to.destroyed || to.write(chunk), due - Date.now());
  });
  from.on('end', () => setTimeout(() => to.end(), Math.max(0, lastDue - Date.now())));
}

/**
 * Starts a forwarder in this process. `delayMs` (default none) is read for every chunk.
 * @returns the bound server; `sockets` holds its open connections (both ends).
 * @throws Error (through the server's `error` event) when the address cannot be bound.
 */
export function forward(
  listenHost: string,
  listenPort: number,
  targetHost: string,
  targetPort: number,
  delayMs: () => number = () => 0,
): net.Server & { sockets: Set<net.Socket> } {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(targetPort, targetHost);
    sockets.add(client);
    sockets.add(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    pipeDelayed(client, upstream, delayMs);
    pipeDelayed(upstream, client, delayMs);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  });
  server.listen(listenPort, listenHost);
  return Object.assign(server, { sockets });
}

if (process.argv[1] && import.meta.url === new URL(`file://${process.argv[1]}`).href) {
  const [listenHost, listenPort, targetHost, targetPort] = process.argv.slice(2);
  const server = forward(listenHost!, Number(listenPort), targetHost!, Number(targetPort));
  server.on('listening', () => console.log('listening'));
  server.on('error', (err) => {
    console.error(`tcp-forward: ${err.message}`);
    process.exit(1);
  });
}
