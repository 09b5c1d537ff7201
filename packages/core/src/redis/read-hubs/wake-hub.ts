import type { RedisClient } from '../scripts';
import { perClient } from '../connection/per-client';
import { duplicateClient } from '../connection/slot-pipelines';

type Listener = (publisher: string) => void;

/**
 * One subscriber connection per base client, shared by every member made from that client, for the
 * coordinator's wake channels (see lua/includes/wake.lua). A member that hears its group's channel
 * heartbeats at once instead of at its next interval, so a rebalance takes round trips, not intervals.
 */
export class WakeHub {
  private static readonly hubs = perClient((base: RedisClient) => new WakeHub(base));
  private readonly listeners = new Map<string, Set<Listener>>();
  private connection: RedisClient | undefined;

  private constructor(private readonly base: RedisClient) {}

  static for(base: RedisClient): WakeHub {
    return WakeHub.hubs(base);
  }

  /** Listens on `channel`; returns the function that stops listening. */
  async listen(channel: string, listener: Listener): Promise<() => Promise<void>> {
    let set = this.listeners.get(channel);
    if (!set) {
      set = new Set();
      this.listeners.set(channel, set);
      await this.subscriber().subscribe(channel);
    }
    set.add(listener);
    return async () => {
      set.delete(listener);
      if (set.size > 0 || this.listeners.get(channel) !== set) return;
      this.listeners.delete(channel);
      if (this.listeners.size === 0) {
        const connection = this.connection;
        this.connection = undefined;
        connection?.disconnect();
      } else {
        // Not awaited: with Redis unreachable the UNSUBSCRIBE waits in ioredis' offline queue for
        // every retry, and a member's stop() must not wait with it. The channel has no listener any
        // more, so whatever still arrives on it is dropped here.
        this.connection?.unsubscribe(channel).catch(() => undefined);
      }
    };
  }

  private subscriber(): RedisClient {
    if (!this.connection) {
      // ioredis' own resubscribe after a reconnect has no catch: a flushed SUBSCRIBE there is an
      // unhandled rejection, which ends the process. This hub resubscribes itself instead.
      const connection = duplicateClient(this.base, { autoResubscribe: false });
      connection.on('error', () => undefined); // a lost wake-up only costs one heartbeat interval
      connection.on('message', (channel: string, publisher: string) => {
        for (const listener of this.listeners.get(channel) ?? []) listener(publisher);
      });
      let connectedBefore = false;
      connection.on('ready', () => {
        if (!connectedBefore) {
          connectedBefore = true;
          return; // the first connection: listen() subscribes
        }
        const channels = [...this.listeners.keys()];
        if (channels.length > 0) connection.subscribe(...channels).catch(() => undefined);
        // Wake-ups published while the connection was down are lost: every listener hears one now.
        for (const set of this.listeners.values()) for (const listener of set) listener('');
      });
      this.connection = connection;
    }
    return this.connection;
  }
}
