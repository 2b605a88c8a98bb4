/**
 * Kafka connection security from a topology's `bus` section: TLS (server verification against a
 * CA file, optional client certificate) and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), mapped to
 * kafkajs' `ssl` and `sasl` client options. Files are read when the bus is created.
 *
 * Secrets: the SASL password comes from the topology (usually `${VAR}` from the environment) or
 * from `passwordFile`; it is returned only inside the kafkajs options and never appears in an
 * error message of this module.
 */
import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import type { SASLOptions } from 'kafkajs';
import { BusError } from '../types.js';

/** TLS settings: absolute PEM file paths; `rejectUnauthorized` false only for tests. */
export interface KafkaTlsSettings {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  rejectUnauthorized: boolean;
}

/** SASL settings; exactly one of `password` and `passwordFile`. */
export interface KafkaSaslSettings {
  mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512';
  username: string;
  password?: string;
  passwordFile?: string;
}

/** kafkajs' `ssl` and `sasl` client options (absent: plaintext, no authentication). */
export interface KafkaSecurityOptions {
  ssl?: ConnectionOptions | boolean;
  sasl?: SASLOptions;
}

/**
 * Reads the files the settings name and returns kafkajs' options.
 * @throws BusError 'bad-input' naming the setting and file that cannot be read (never its
 *   content), or when SASL has no password or both a password and a passwordFile.
 */
export function kafkaSecurityOptions(
  tls?: KafkaTlsSettings,
  sasl?: KafkaSaslSettings,
): KafkaSecurityOptions {
  const out: KafkaSecurityOptions = {};
  if (tls !== undefined) {
    const read = (field: string, file: string | undefined): Buffer | undefined => {
      if (file === undefined) return undefined;
      try {
        return readFileSync(file);
      } catch (e) {
        throw new BusError(
          'bad-input',
          `bus.tls.${field}: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
        );
      }
    };
    const ca = read('caFile', tls.caFile);
    const cert = read('certFile', tls.certFile);
    const key = read('keyFile', tls.keyFile);
    if ((cert === undefined) !== (key === undefined)) {
      throw new BusError(
        'bad-input',
        'bus.tls: certFile and keyFile go together (mutual TLS needs both)',
      );
    }
    out.ssl = {
      rejectUnauthorized: tls.rejectUnauthorized,
      ...(ca !== undefined ? { ca: [ca] } : {}),
      ...(cert !== undefined ? { cert, key } : {}),
    };
  }
  if (sasl !== undefined) {
    if ((sasl.password === undefined) === (sasl.passwordFile === undefined)) {
      throw new BusError('bad-input', 'bus.sasl: give exactly one of password and passwordFile');
    }
    let password = sasl.password;
    if (sasl.passwordFile !== undefined) {
      try {
        password = readFileSync(sasl.passwordFile, 'utf8').replace(/\r?\n$/, '');
      } catch (e) {
        throw new BusError(
          'bad-input',
          `bus.sasl.passwordFile: cannot read ${sasl.passwordFile}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`,
        );
      }
    }
    out.sasl = {
      mechanism: sasl.mechanism,
      username: sasl.username,
      password: password!,
    } as SASLOptions;
  }
  return out;
}

/** The kafka variant of a topology's `bus` section (engine/config TopologyBus). */
export interface KafkaTopologyBus {
  kind: 'kafka';
  brokers: string[];
  clientId: string;
  tls?: KafkaTlsSettings;
  sasl?: KafkaSaslSettings;
}

/**
 * createKafkaBus options of a topology's kafka bus: brokers, clientId (suffixed with `-<part>`
 * when given, so each actor's connections are told apart in broker logs), TLS and SASL.
 * @throws BusError 'bad-input' as {@link kafkaSecurityOptions}.
 */
export function kafkaBusOptionsOf(
  bus: KafkaTopologyBus,
  part?: string,
): { brokers: string[]; clientId: string } & KafkaSecurityOptions {
  return {
    brokers: [...bus.brokers],
    clientId: part === undefined ? bus.clientId : `${bus.clientId}-${part}`,
    ...kafkaSecurityOptions(bus.tls, bus.sasl),
  };
}
