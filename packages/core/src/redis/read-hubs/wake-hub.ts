import type { RedisClient } from '../scripts';
import { perClient } from '../connection/per-client';
import { ReadDeadlineError, withReadDeadline } from '../connection/read-deadline';
import { duplicateClient } from '../connection/slot-pipelines';

type Listener = (publisher: string) => void;
/** Told (with what happened) when the subscriber connection stopped answering and was reset. */
type StuckListener = (message: string) => void;

/**
 * How long the subscriber's SUBSCRIBE or keep-alive PING may take before its connection counts as
 * stuck (half-open: it stays open and nothing gets through) and is reset (SPEC 10.1). Generous for a
 * round trip, short beside a heartbeat interval: a stuck subscriber only delays rebalances to it.
 */
export const WAKE_ANSWER_DEADLINE_MS = 2000;
/**
 * How often the subscriber is asked whether it still answers (PING, valid on a subscribed
 * connection): a half-open subscriber hears no wake-up and, without this, would say nothing.
 */
export const WAKE_PING_INTERVAL_MS = 5000;

/**
 * One subscriber connection per base client, shared by every member made from that client, for the
 * coordinator's wake channels (see lua/includes/wake.lua). A member that hears its group's channel
 * heartbeats at once instead of at its next interval, so a rebalance takes round trips, not intervals.
 * Every call on the subscriber is bounded, and a keep-alive PING finds a connection that stopped
 * answering: it is reset (ioredis reconnects, the hub subscribes again and wakes every listener),
 * each member is told (`error`), and `problem()` says so until a PING is answered again.
 */
export class WakeHub {
  private static readonly hubs = perClient((base: RedisClient) => new WakeHub(base));
  private readonly listeners = new Map<string, Set<Listener>>();
  private readonly stuckListeners = new Set<StuckListener>();
  private connection: RedisClient | undefined;
  private keepAlive: NodeJS.Timeout | undefined;
  private stuck: string | undefined;

  private constructor(private readonly base: RedisClient) {}

  static for(base: RedisClient): WakeHub {
    return WakeHub.hubs(base);
  }

  /** While the subscriber does not answer: one line for `stats().problems`, else undefined. */
  problem(): string | undefined {
    return this.stuck;
  }

  /**
   * Listens on `channel`; returns the function that stops listening. Rejects when the SUBSCRIBE
   * fails or gets no answer within WAKE_ANSWER_DEADLINE_MS (the connection is reset then); the
   * caller then works without wake-ups. `onStuck` hears of every reset of a stuck subscriber.
   */
  async listen(channel: string, listener: Listener, onStuck?: StuckListener): Promise<() => Promise<void>> {
    let set = this.listeners.get(channel);
    if (!set) {
      set = new Set();
      this.listeners.set(channel, set);
      const subscriber = this.subscriber();
      try {
        await withReadDeadline(
          subscriber,
          subscriber.subscribe(channel),
          WAKE_ANSWER_DEADLINE_MS,
          'the wake-up SUBSCRIBE',
          'wake-up subscriber',
        );
      } catch (error) {
        if (set.size === 0 && this.listeners.get(channel) === set) this.listeners.delete(channel);
        if (this.listeners.size === 0) this.close();
        throw error;
      }
    }
    set.add(listener);
    if (onStuck) this.stuckListeners.add(onStuck);
    return async () => {
      set.delete(listener);
      if (onStuck) this.stuckListeners.delete(onStuck);
      if (set.size > 0 || this.listeners.get(channel) !== set) return;
      this.listeners.delete(channel);
      if (this.listeners.size === 0) {
        this.close();
      } else {
        // Not awaited: with Redis unreachable the UNSUBSCRIBE waits in ioredis' offline queue for
        // every retry, and a member's stop() must not wait with it. The channel has no listener any
        // more, so whatever still arrives on it is dropped here.
        this.connection?.unsubscribe(channel).catch(() => undefined);
      }
    };
  }

  private close(): void {
    const connection = this.connection;
    this.connection = undefined;
    clearInterval(this.keepAlive);
    this.keepAlive = undefined;
    this.stuck = undefined;
    connection?.disconnect();
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
      this.keepAlive = setInterval(() => void this.ping(connection), WAKE_PING_INTERVAL_MS);
      this.keepAlive.unref();
    }
    return this.connection;
  }

  /** The keep-alive: a PING past its deadline resets the connection (withReadDeadline) and is reported. */
  private async ping(connection: RedisClient): Promise<void> {
    if (connection !== this.connection || connection.status !== 'ready') return;
    try {
      await withReadDeadline(connection, connection.ping(), WAKE_ANSWER_DEADLINE_MS, "the wake-up subscriber's PING", 'wake-up subscriber');
      this.stuck = undefined;
    } catch (error) {
      if (!(error instanceof ReadDeadlineError) || connection !== this.connection) return;
      this.stuck = `the wake-up subscriber got no answer (${error.message}): rebalances wait for heartbeat intervals until it answers again`;
      for (const onStuck of this.stuckListeners) onStuck(error.message);
    }
  }
}
