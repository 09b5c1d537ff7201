import { EventEmitter } from 'node:events';
import type { Redis } from 'ioredis';
import type { ShardClient } from '../redis/shard-client';
import { sleep } from './abortable-sleep';
import { AckBatcher } from './ack-batcher';
import type { ResolvedMemberOptions } from './member-options';
import { ShardDispatcher } from './shard-dispatcher';
import { ShardReader } from './shard-reader';
import { type PollerEvents, ShardError, ShardSet } from './shard-state';

export { type AcknowledgedEvent, type ClaimRefusedEvent, HandlerTimeoutError, type PollerEvents, ShardError } from './shard-state';

/**
 * Releasing a shard waits this long at least for its outstanding acks (even with no time left for
 * its handler): reporting the revocation first would let the next owner run them again.
 */
const MIN_ACK_SETTLE_MS = 1000;

/**
 * The polling adapter of one member (SPEC sections 4 and 5), as the member sees it: shards come and
 * go, holds are set, problems are reported. The work is done by three parts sharing one `ShardSet`:
 * the reader (claims, takeovers, reads, sweeps), the dispatcher (handlers, retries, dead letters)
 * and the ack batcher (fenced acknowledgements).
 */
export class ShardPoller extends EventEmitter<PollerEvents> {
  private readonly shards = new ShardSet();
  private readonly acks: AckBatcher;
  private readonly dispatcher: ShardDispatcher;
  private readonly reader: ShardReader;
  private running = false;

  constructor(
    client: ShardClient,
    command: { client(subcommand: 'UNBLOCK', id: number): Promise<unknown> },
    reader: Redis,
    options: ResolvedMemberOptions,
    /** False while the member's lease may be lost: no handler may start then. */
    mayStartHandlers: () => boolean,
  ) {
    super();
    this.acks = new AckBatcher(client, this, () => this.running);
    this.dispatcher = new ShardDispatcher(this.shards, client, this.acks, this, options, mayStartHandlers, (state) => this.reader.onDrained(state));
    this.reader = new ShardReader(this.shards, client, command, reader, this.acks, this, options, mayStartHandlers, () => this.dispatcher.dispatch());
  }

  /** Handlers running now. */
  get activeHandlers(): number {
    return this.dispatcher.activeHandlers;
  }

  get bufferedEntries(): number {
    return this.shards.buffered;
  }

  ownedShards(): number[] {
    return [...this.shards.order];
  }

  start(): void {
    if (this.running) return;
    this.running = true;
    this.reader.start();
  }

  /** A shard granted at `grantEpoch`: claim its token, take over its pending entries, then read it. */
  addShard(shardIndex: number, grantEpoch: number): void {
    const existing = this.shards.get(shardIndex);
    if (existing && existing.phase !== 'released') return;
    this.shards.add(shardIndex, grantEpoch);
    this.reader.interruptRead();
  }

  /**
   * Entries of the given shards from `fromId` on are read but not handled until the holds are
   * replaced; a shard stops being read once it has held entries. An empty map releases every hold.
   */
  setHolds(holds: Map<number, string>): void {
    this.shards.setHolds(holds);
    this.dispatcher.dispatch();
    this.reader.interruptRead();
  }

  /**
   * Shard-level conditions that stop work and need someone's attention (see CoordinatedMember.stats):
   * a claim refused by a newer token, a dead letter that cannot be written. One line each, until
   * the condition clears or the shard is released.
   */
  problems(): string[] {
    const lines = this.shards.all().flatMap((state) => [...state.problems.values()]);
    // A new grant that waits for an earlier grant's handler (it cannot be stopped) says so: with
    // handlerTimeoutMs 0 a handler that never settles would leave the shard owned and idle.
    for (const [shardIndex, old] of this.shards.lingering) {
      if (this.shards.get(shardIndex)) lines.push(`shard ${shardIndex}: waiting for the handler of ${old.current ?? 'an entry'} from an earlier grant (epoch ${old.grantEpoch}) before handling anything`);
    }
    return lines;
  }

  /** Entries waiting for a hold to be released. */
  get heldEntries(): number {
    let count = 0;
    for (const state of this.shards.all()) count += state.held.length;
    return count;
  }

  /**
   * Stops reading a shard and waits, at most `waitForHandlerMs`, for its in-flight handler; then
   * for every outstanding ack of the shard (earlier batches still retrying too), at least
   * `MIN_ACK_SETTLE_MS`. Entries read but not started stay pending for the next owner.
   */
  async releaseShard(shardIndex: number, waitForHandlerMs: number): Promise<void> {
    const state = this.shards.get(shardIndex);
    if (!state) return;
    const deadline = Date.now() + waitForHandlerMs;
    this.shards.release(state);
    await this.reader.endReadOf(shardIndex);
    if (state.inFlight) {
      await Promise.race([state.inFlight, sleep(Math.max(0, deadline - Date.now()))]);
    }
    const settled = await this.acks.settled(shardIndex, Math.max(MIN_ACK_SETTLE_MS, deadline - Date.now()));
    if (!settled) {
      this.emit('error', new ShardError(`shard ${shardIndex}: acknowledgements still unsettled when it was released; its next owner may process them again`, shardIndex));
    }
  }

  /** Drops every shard at once (lease lost, fenced): nothing new starts; in-flight acks may be refused. */
  dropAll(): void {
    for (const state of this.shards.all()) this.shards.release(state);
    this.reader.interruptRead();
  }

  /** Stops reading, waits (bounded) for in-flight handlers, flushes acknowledgements. */
  async stop(timeoutMs: number): Promise<void> {
    const states = this.shards.all();
    const inFlight = states.map((s) => s.inFlight).filter((p): p is Promise<void> => p !== null);
    // Released first, so that no handler starts while the in-flight ones finish: an entry started
    // now would still be running when the member leaves, and its next owner would run it again.
    for (const state of states) this.shards.release(state);
    const reading = this.reader.stop();
    await Promise.race([Promise.all(inFlight), sleep(timeoutMs)]);
    await reading;
    // Sent once more, not retried: the member is leaving, and the next owner redoes what is left.
    this.running = false;
    await this.acks.flush();
  }

  async flushAcks(): Promise<void> {
    await this.acks.flush();
  }
}

