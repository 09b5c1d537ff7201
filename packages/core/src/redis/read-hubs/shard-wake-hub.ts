import type { Cluster } from 'ioredis';
import { perClient } from '../connection/per-client';
import { duplicateCluster } from '../connection/slot-pipelines';

type Listener = () => void;

/**
 * The subscriber's slot table is refreshed this often. When a slot moves, Redis unsubscribes its
 * channels (SUNSUBSCRIBE pushed to the subscriber) and ioredis refreshes its slot table and
 * subscribes them again on the new master, but only if the table it fetched shows the move: one
 * fetched from a master not told yet (a move updates the masters one by one) looks unchanged, and
 * the channel stayed unsubscribed until the next topology change (4 moves in 45 in a probe, none
 * back within 12 s; its shard was polled every 500 ms meanwhile, never woken). A periodic refresh
 * finds the move (45 of 45 back, the slowest after 3 s).
 */
const SLOTS_REFRESH_MS = 5000;

/**
 * On a Redis Cluster a member cannot block on many shards at once (each shard stream has its own
 * slot), so it polls them. A producer's write publishes on the shard's channel (sharded pub/sub,
 * appendEntries-5.lua), and this hub, one per base client and shared by every member made from it,
 * hears those channels: the reader polls at once instead of at its next interval. ioredis keeps one
 * sharded subscriber connection per master and moves channels with their slots.
 *
 * A wake-up only shortens a wait: one that is lost (a subscriber reconnecting, a failover, a writer
 * that is not a StreamProducer) costs at most the reader's longest poll interval, never an entry.
 */
export class ShardWakeHub {
  private static readonly hubs = perClient((base: Cluster) => new ShardWakeHub(base));
  private readonly listeners = new Map<string, Set<Listener>>();
  /** channel -> its SSUBSCRIBE, while it is under way or done. */
  private readonly subscriptions = new Map<string, Promise<boolean>>();
  private connection: Cluster | undefined;

  private constructor(private readonly base: Cluster) {}

  static for(base: Cluster): ShardWakeHub {
    return ShardWakeHub.hubs(base);
  }

  /**
   * Listens on a shard channel. `subscribed` resolves true once Redis confirmed the subscription,
   * false when it failed (the caller keeps polling at its short interval, and may listen again).
   */
  listen(channel: string, listener: Listener): { subscribed: Promise<boolean>; stop: () => void } {
    let set = this.listeners.get(channel);
    if (!set) {
      set = new Set();
      this.listeners.set(channel, set);
    }
    set.add(listener);
    const subscribed = this.subscribe(channel);
    const listening = set;
    return {
      subscribed,
      stop: () => {
        listening.delete(listener);
        if (listening.size > 0 || this.listeners.get(channel) !== listening) return;
        this.listeners.delete(channel);
        this.subscriptions.delete(channel);
        if (this.listeners.size === 0) {
          const connection = this.connection;
          this.connection = undefined;
          connection?.disconnect();
        } else {
          // Not awaited (an unreachable node must not hold up a release); a late message is dropped here.
          this.connection?.sunsubscribe(channel).catch(() => undefined);
        }
      },
    };
  }

  /** SSUBSCRIBE once per channel (one channel per call: a call's channels must share a slot). A failed one is tried again by the next listen. */
  private subscribe(channel: string): Promise<boolean> {
    const known = this.subscriptions.get(channel);
    if (known) return known;
    const subscription = this.subscriber()
      .ssubscribe(channel)
      .then(
        () => true,
        () => {
          if (this.subscriptions.get(channel) === subscription) this.subscriptions.delete(channel);
          return false;
        },
      );
    this.subscriptions.set(channel, subscription);
    return subscription;
  }

  private subscriber(): Cluster {
    if (!this.connection) {
      const connection = duplicateCluster(this.base, {}, { shardedSubscribers: true, slotsRefreshInterval: SLOTS_REFRESH_MS });
      connection.on('error', () => undefined); // a lost wake-up costs one poll interval, nothing else
      connection.on('smessage', (channel: string) => {
        for (const listener of this.listeners.get(channel) ?? []) listener();
      });
      this.connection = connection;
    }
    return this.connection;
  }
}
