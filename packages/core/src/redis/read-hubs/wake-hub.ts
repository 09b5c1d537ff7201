import type { RedisClient } from '../scripts';
import { perClient } from '../connection/per-client';
import { ReadDeadlineError, withReadDeadline } from '../connection/read-deadline';
import { duplicateClient } from '../connection/slot-pipelines';

/** Told when a wake-up is for this listener's member (or for everyone but its publisher). */
type Listener = () => void;
/** Told (with what happened) when the subscriber stopped answering, or a SUBSCRIBE failed, and was reset. */
type StuckListener = (message: string) => void;

interface Registration {
  memberId: string;
  listener: Listener;
  onStuck: StuckListener | undefined;
}

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
 * After a SUBSCRIBE failed or came back late, the pause before it is sent again (on the connection
 * the failure reset). Short beside the heartbeat interval the members fall back to meanwhile.
 */
export const WAKE_RESUBSCRIBE_PAUSE_MS = 500;

/**
 * Reads a wake-up (lua/includes/wake.lua): the member whose call caused it, then the members it is
 * for, separated by spaces (member ids have none); no members named means every member but the
 * publisher.
 */
export function wakeUpIsFor(message: string, memberId: string): boolean {
  const [publisher, ...targets] = message.split(' ');
  return targets.length === 0 ? publisher !== memberId : targets.includes(memberId);
}

/**
 * One subscriber connection per base client, shared by every member made from that client, for the
 * coordinator's wake channels (see lua/includes/wake.lua). A member that a wake-up names heartbeats
 * at once instead of at its next interval, so a rebalance takes round trips, not intervals.
 *
 * A wake-up is a hint: a lost one costs the member one heartbeat interval, never a shard. Every call
 * on the subscriber is bounded: a SUBSCRIBE past WAKE_ANSWER_DEADLINE_MS resets the connection and
 * is sent again (WAKE_RESUBSCRIBE_PAUSE_MS later) until it is answered, and a keep-alive PING finds a
 * connection that stopped answering and resets it. Meanwhile `hears(channel)` is false (members
 * heartbeat at a short interval instead of waiting to be woken), each member is told (`error`), and
 * `problem()` says so. Once a channel is subscribed again its members are woken: what was published
 * meanwhile is lost.
 */
export class WakeHub {
  private static readonly hubs = perClient((base: RedisClient) => new WakeHub(base));
  private readonly channels = new Map<string, Set<Registration>>();
  /** Channels Redis confirmed on the current connection. */
  private readonly subscribed = new Set<string>();
  /** Channels that may have missed wake-ups (a failed SUBSCRIBE, a reconnect): woken once subscribed. */
  private readonly missed = new Set<string>();
  private connection: RedisClient | undefined;
  private keepAlive: NodeJS.Timeout | undefined;
  private retry: NodeJS.Timeout | undefined;
  /** The SUBSCRIBE under way, and whether channels came while it ran (a second one follows). */
  private subscribing: Promise<void> | undefined;
  private subscribeAgain = false;
  /** Why the subscriber is not trusted now (a PING or a SUBSCRIBE without answer), else undefined. */
  private stuck: { by: 'ping' | 'subscribe'; problem: string } | undefined;

  private constructor(private readonly base: RedisClient) {}

  static for(base: RedisClient): WakeHub {
    return WakeHub.hubs(base);
  }

  /** While the subscriber does not answer: one line for `stats().problems`, else undefined. */
  problem(): string | undefined {
    return this.stuck?.problem;
  }

  /** Whether Redis confirmed the subscription of `channel` and the subscriber answers: wake-ups reach its listeners. */
  hears(channel: string): boolean {
    return this.stuck === undefined && this.subscribed.has(channel);
  }

  /**
   * Listens on `channel` for wake-ups meant for `memberId`; returns the function that stops
   * listening. Never waits and never fails: the hub subscribes (and subscribes again, each try
   * bounded) by itself; `hears(channel)` says when wake-ups arrive. `onStuck` hears of every reset
   * of a subscriber that did not answer.
   */
  listen(channel: string, memberId: string, listener: Listener, onStuck?: StuckListener): () => Promise<void> {
    let set = this.channels.get(channel);
    if (!set) {
      set = new Set();
      this.channels.set(channel, set);
    }
    const registration: Registration = { memberId, listener, onStuck };
    set.add(registration);
    this.subscribeMissing();
    const listening = set;
    return async () => {
      listening.delete(registration);
      if (listening.size > 0 || this.channels.get(channel) !== listening) return;
      this.channels.delete(channel);
      this.subscribed.delete(channel);
      this.missed.delete(channel);
      if (this.channels.size === 0) {
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
    clearTimeout(this.retry);
    this.keepAlive = undefined;
    this.retry = undefined;
    this.stuck = undefined;
    this.subscribed.clear();
    this.missed.clear();
    connection?.disconnect();
  }

  /**
   * SUBSCRIBE of every channel not confirmed yet, one call at a time (one that comes meanwhile runs
   * after it, on whatever connection is current then: the one under way may be on a connection
   * closed since, with the last listener gone, and a new listener come).
   */
  private subscribeMissing(): void {
    if (this.channels.size === 0) return;
    if (this.subscribing) {
      this.subscribeAgain = true;
      return;
    }
    const connection = this.subscriber();
    const missing = [...this.channels.keys()].filter((channel) => !this.subscribed.has(channel));
    if (missing.length === 0) return;
    this.subscribing = this.subscribe(connection, missing).finally(() => {
      this.subscribing = undefined;
      if (this.subscribeAgain) {
        this.subscribeAgain = false;
        this.subscribeMissing();
      }
    });
  }

  private async subscribe(connection: RedisClient, channels: string[]): Promise<void> {
    try {
      await withReadDeadline(
        connection,
        connection.subscribe(...channels),
        WAKE_ANSWER_DEADLINE_MS,
        'the wake-up SUBSCRIBE',
        'wake-up subscriber',
      );
    } catch (error) {
      if (connection !== this.connection) return;
      for (const channel of channels) this.missed.add(channel);
      const message = (error as Error).message;
      this.stuck = {
        by: 'subscribe',
        problem: `the wake-up subscriber could not subscribe (${message}): members heartbeat at a short interval instead of being woken until it can`,
      };
      for (const set of this.channels.values()) for (const { onStuck } of set) onStuck?.(message);
      clearTimeout(this.retry);
      this.retry = setTimeout(() => this.subscribeMissing(), WAKE_RESUBSCRIBE_PAUSE_MS);
      this.retry.unref();
      return;
    }
    if (connection !== this.connection) return;
    if (this.stuck?.by === 'subscribe') this.stuck = undefined;
    for (const channel of channels) {
      // Stopped meanwhile: whatever arrives on it is dropped (see listen's stop).
      if (!this.channels.has(channel)) continue;
      this.subscribed.add(channel);
      if (this.missed.delete(channel)) for (const { listener } of this.channels.get(channel)!) listener();
    }
  }

  private subscriber(): RedisClient {
    if (!this.connection) {
      // ioredis' own resubscribe after a reconnect has no catch and no deadline: a flushed SUBSCRIBE
      // there is an unhandled rejection, which ends the process. This hub resubscribes itself instead.
      const connection = duplicateClient(this.base, { autoResubscribe: false });
      connection.on('error', () => undefined); // a lost wake-up only costs one heartbeat interval
      connection.on('message', (channel: string, message: string) => {
        for (const { memberId, listener } of this.channels.get(channel) ?? []) {
          if (wakeUpIsFor(message, memberId)) listener();
        }
      });
      // Whatever is published while the connection is down is lost: every channel is missed until
      // it is subscribed again on the next connection.
      connection.on('close', () => {
        if (this.connection !== connection) return;
        for (const channel of this.subscribed) this.missed.add(channel);
        this.subscribed.clear();
      });
      let readyBefore = false;
      connection.on('ready', () => {
        if (this.connection !== connection) return;
        // A reconnect: the new connection has no subscription, whatever 'close' did or did not say
        // (a Cluster client reconnects its nodes on its own).
        if (readyBefore) {
          for (const channel of this.subscribed) this.missed.add(channel);
          this.subscribed.clear();
        }
        readyBefore = true;
        this.subscribeMissing();
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
      if (this.stuck?.by === 'ping') this.stuck = undefined;
    } catch (error) {
      if (!(error instanceof ReadDeadlineError) || connection !== this.connection) return;
      this.stuck = {
        by: 'ping',
        problem: `the wake-up subscriber got no answer (${error.message}): members heartbeat at a short interval instead of being woken until it answers again`,
      };
      for (const set of this.channels.values()) for (const { onStuck } of set) onStuck?.(error.message);
    }
  }
}
