/**
 * The event object a service host hands to handlers: one mutable object reused for every input
 * (handlers must not keep it), its key decoded from the envelope only when a handler reads it.
 */
import {
  decodeChange,
  decodeJson,
  EVENT_TYPE_CHANGE,
  EVENT_TYPE_JSON,
  type Change,
  type EnvelopeView,
} from '../codec/index.js';
import type { ServiceEvent } from './api.js';

/** Mutable event object reused for every input (handlers must not keep it). */
export class HostEvent implements ServiceEvent {
  type = 0;
  /** The key, or null until first read from `keySource` (a handler that never reads it costs no UTF-8 decoding). */
  private keyText: string | null = '';
  private keySource: EnvelopeView | null = null;
  get key(): string {
    if (this.keyText === null) this.keyText = this.keySource!.key ?? '';
    return this.keyText;
  }
  set key(key: string) {
    this.keyText = key;
  }
  /** The key is `view`'s, decoded on first use (while `view` still wraps this event). */
  keyFrom(view: EnvelopeView): void {
    this.keyText = null;
    this.keySource = view;
  }
  eventTimeMs = 0;
  queue = '';
  partition = 0;
  index = 0;
  payload: Uint8Array = new Uint8Array(0);
  /**
   * The payload as a captured change.
   * @throws Error naming the event if it is not a change (type 1).
   */
  change(): Change {
    if (this.type !== EVENT_TYPE_CHANGE)
      throw new Error(
        `event ${this.queue}/${this.partition}#${this.index} is type ${this.type}, not a change`,
      );
    return decodeChange(this.payload);
  }
  /**
   * The payload as JSON.
   * @throws Error naming the event if it is not a JSON event (type 2).
   */
  json<T>(): T {
    if (this.type !== EVENT_TYPE_JSON)
      throw new Error(
        `event ${this.queue}/${this.partition}#${this.index} is type ${this.type}, not json`,
      );
    return decodeJson(this.payload) as T;
  }
}
