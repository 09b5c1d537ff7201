import type { Redis } from 'ioredis';
import { perClient } from '../connection/per-client';
import { compareStreamIds } from '../../protocol/stream-ids';
import type { RedisClient } from '../scripts';
import { ReadDeadlineError, withReadDeadline } from '../connection/read-deadline';
import { duplicateClient } from '../connection/slot-pipelines';
import { BufferBudget } from './buffer-budget';

/** How long the doorbell blocks; a change of the watched set cuts it short (CLIENT UNBLOCK). */
const DOORBELL_BLOCK_MS = 5000;
/** Past its block time, a doorbell read that has not come back is taken as lost (half-open connection). */
const DOORBELL_GRACE_MS = 2000;
/** After a ring, how long the doorbell waits at most for the readers to read before it blocks again. */
const RING_SETTLE_MS = 100;
/** After a failed doorbell read, the pause before the next (every watcher was rung meanwhile). */
const DOORBELL_RETRY_MS = 200;
/** Tries of CLIENT UNBLOCK while the doorbell's read has not reached Redis yet (1 ms apart). */
const UNBLOCK_TRIES = 20;

/**
 * A member's reader as the hub sees it. `watched()` names the streams it has read to the end and
 * the id after which a new entry means "read again"; `ring` tells it which streams got one (the
 * first new id of each, '' for "maybe": after a doorbell failure) and resolves when it has reacted
 * (read, or decided not to); `modeChanged` tells it that it is alone on the hub now, or no longer,
 * and must cut a blocking read short and look again.
 */
export interface HubReader {
  watched(): Iterable<[stream: string, afterId: string]>;
  ring(rings: ReadonlyMap<string, string>): Promise<void>;
  modeChanged(): void;
}

/**
 * The read transport of one process, per base client (like WakeHub): every member made from that
 * client reads through it, so a process holds O(1) read connections per Redis, not one per member.
 * Single Redis (and Sentinel) only: on a Cluster members read with polled per-shard reads instead.
 *
 * - **Solo** (one member on the hub): the member reads with a blocking `XREADGROUP` on the hub's
 *   *blocking* connection, exactly as a member with a connection of its own would: one round trip
 *   from a new entry to its handler.
 * - **Shared** (two or more): the blocking connection becomes the *doorbell*: one `XREAD COUNT 1
 *   BLOCK` on every stream some member has read to the end. XREAD (no group) moves no entry and
 *   changes no group, so a lost doorbell reply loses nothing. When it returns, the members watching
 *   those streams are rung, and read with non-blocking `XREADGROUP`s (each under its own consumer
 *   name) on the *shared read* connection. On a doorbell failure every watcher is rung (each reads
 *   once), so nothing waits on a ring that was lost.
 *
 * The shared read connection opens with the second member and stays until the last one leaves; the
 * blocking connection opens with the first. The blocking connection serves one thing at a time: a
 * solo read and the doorbell never overlap (the doorbell waits until the solo read it cut short
 * has returned, and no solo read starts while the doorbell loop runs).
 */
export class ReadHub {
  private static readonly hubs = perClient((base: RedisClient) => new ReadHub(base));
  /** The entries the hub's readers may buffer, together (maxBufferedEntriesPerClient). */
  readonly budget = new BufferBudget();
  private readonly readers = new Set<HubReader>();
  private blocking: Redis | undefined;
  /** CLIENT ID of the blocking connection (undefined until known, and after it closed). */
  private blockingId: number | undefined;
  private shared: Redis | undefined;
  private doorbellLoop: Promise<void> | undefined;
  /** The solo read under way on the blocking connection, until it returns. */
  private soloRead: Promise<unknown> | undefined;
  /** The streams (and ids) the doorbell read under way covers, until it returns. */
  private inFlight: Map<string, string> | undefined;
  private wake: (() => void) | undefined;
  private wakePending = false;

  private constructor(private readonly base: RedisClient) {}

  static for(base: RedisClient): ReadHub {
    return ReadHub.hubs(base);
  }

  /** Starts serving `reader`; returns the function that stops. The last one to stop closes the connections. */
  register(reader: HubReader): () => void {
    const others = [...this.readers];
    this.readers.add(reader);
    this.blocking ??= this.openBlocking();
    if (this.readers.size >= 2) {
      this.shared ??= this.connection();
      // A solo reader blocked now must let go of the blocking connection for the doorbell.
      for (const other of others) other.modeChanged();
      this.ensureDoorbell();
    }
    this.changed();
    return () => {
      if (!this.readers.delete(reader)) return;
      if (this.readers.size === 0) {
        const { blocking, shared } = this;
        this.blocking = undefined;
        this.shared = undefined;
        this.blockingId = undefined;
        this.notify();
        blocking?.disconnect();
        shared?.disconnect();
        return;
      }
      // The doorbell may be waiting on the reader's streams only, or it may end (one reader left).
      if (this.inFlight) void this.unblockDoorbell(this.inFlight);
      this.notify();
    };
  }

  /** Runs the doorbell while two or more readers share the hub (again, if one came as the last loop ended). */
  private ensureDoorbell(): void {
    if (this.doorbellLoop || this.readers.size < 2) return;
    this.doorbellLoop = this.runDoorbell().finally(() => {
      this.doorbellLoop = undefined;
      if (this.readers.size >= 2) this.ensureDoorbell();
      // Alone again: the remaining reader may read solo now.
      else for (const left of this.readers) left.modeChanged();
    });
  }

  /**
   * Starts `read` on the blocking connection when `reader` is alone on the hub and the doorbell is
   * not running: returns its promise, or undefined (read through `sharedConnection` instead). The
   * check and the start are one step, so the doorbell never meets a solo read it does not know of.
   */
  readSolo<T>(reader: HubReader, read: (connection: Redis) => Promise<T>): Promise<T> | undefined {
    const blocking = this.blocking;
    if (!blocking || !this.mayReadSolo(reader)) return undefined;
    const done = read(blocking);
    this.soloRead = done;
    void done
      .catch(() => undefined)
      .then(() => {
        if (this.soloRead === done) this.soloRead = undefined;
      });
    return done;
  }

  /** Whether `reader` is alone on the hub and the doorbell is not running: its next read may block. */
  mayReadSolo(reader: HubReader): boolean {
    return this.blocking !== undefined && this.doorbellLoop === undefined && this.readers.size === 1 && this.readers.has(reader);
  }

  /** Cuts the solo read under way short (CLIENT UNBLOCK from the base client), tried again while it has not reached Redis. */
  unblockSolo(): void {
    const read = this.soloRead;
    if (read) void this.unblock(() => this.soloRead === read);
  }

  /** The shared connection for non-blocking reads; undefined when none is open (alone, or closed). */
  get sharedConnection(): Redis | undefined {
    return this.shared;
  }

  /**
   * A connection of the hub that ioredis gave up for good ("end": its connector closed mid-way, a
   * Sentinel lookup it may not retry) is opened again; every read on it would fail "Connection is
   * closed." while the members keep their shards.
   */
  repair(): void {
    for (const connection of [this.blocking, this.shared]) {
      if (connection?.status === 'end') connection.connect().catch(() => undefined);
    }
  }

  /**
   * A reader's watched set changed (a shard was read to the end, or came or went): the doorbell
   * read under way is cut short if it misses a stream (or starts after a new entry it must see).
   */
  changed(): void {
    const request = this.inFlight;
    if (!request) {
      this.notify();
      return;
    }
    for (const reader of this.readers) {
      for (const [stream, afterId] of reader.watched()) {
        const covered = request.get(stream);
        if (covered === undefined || compareStreamIds(afterId, covered) < 0) {
          void this.unblockDoorbell(request);
          return;
        }
      }
    }
  }

  private connection(): Redis {
    // Same options as the base client (password, ACL user, TLS, the loading retry). A read cut off
    // by a reset is sent again after the reconnect (ioredis' default; without it, its promise would
    // never settle): what the first one delivered is pending here untracked, and the resent read's
    // gap check (or the own-pending sweep) takes it.
    const connection = duplicateClient(this.base) as Redis;
    connection.on('error', () => undefined); // reported by the readers through their read loops
    return connection;
  }

  private openBlocking(): Redis {
    const blocking = this.connection();
    // A new connection has a new id: CLIENT UNBLOCK must name the current one.
    blocking.on('ready', () => void this.refreshBlockingId(blocking));
    blocking.on('close', () => {
      if (this.blocking === blocking) this.blockingId = undefined;
    });
    return blocking;
  }

  private replaceBlocking(old: Redis): void {
    this.blocking = this.openBlocking();
    this.blockingId = undefined;
    old.disconnect();
  }

  private async refreshBlockingId(blocking: Redis): Promise<void> {
    try {
      // No deadline: a read resent after the reconnect may be ahead of it on the connection, and
      // resetting the connection for a late id would cut that read. Until the id is known, a
      // blocking read cannot be cut short and ends at its block time.
      const id = Number(await blocking.client('ID'));
      if (this.blocking === blocking) this.blockingId = id;
    } catch {
      // Asked again at the next 'ready'.
    }
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    if (wake) wake();
    else this.wakePending = true;
  }

  private idle(ms: number): Promise<void> {
    if (this.wakePending) {
      this.wakePending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        if (this.wake === done) this.wake = undefined;
        resolve();
      };
      timer = setTimeout(done, ms);
      this.wake = done;
    });
  }

  /** CLIENT UNBLOCK of the doorbell read under way. */
  private unblockDoorbell(request: Map<string, string>): Promise<void> {
    return this.unblock(() => this.inFlight === request);
  }

  /**
   * CLIENT UNBLOCK of the blocking connection, tried again (1 ms apart) while the read it is for
   * (`stillOut`) has not reached Redis yet; sent from the base client. A failure leaves the read to
   * its block timeout (bounded; the members' loops bound it by their due sweeps).
   */
  private async unblock(stillOut: () => boolean): Promise<void> {
    for (let attempt = 0; attempt < UNBLOCK_TRIES && stillOut(); attempt++) {
      const id = this.blockingId;
      if (id === undefined) return;
      const unblocked = await (this.base as Redis).client('UNBLOCK', id).catch(() => 0);
      if (Number(unblocked) === 1) return;
      await new Promise((resolve) => setTimeout(resolve, 1));
    }
  }

  /** Every stream watched now, each with the earliest id after which a reader wants to hear. */
  private collect(): Map<string, string> {
    const streams = new Map<string, string>();
    for (const reader of this.readers) {
      for (const [stream, afterId] of reader.watched()) {
        const known = streams.get(stream);
        if (known === undefined || compareStreamIds(afterId, known) < 0) streams.set(stream, afterId);
      }
    }
    return streams;
  }

  private async ringAll(rings: ReadonlyMap<string, string>): Promise<void> {
    const reactions = [...this.readers].map((reader) => reader.ring(rings).catch(() => undefined));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([Promise.all(reactions), new Promise((resolve) => (timer = setTimeout(resolve, RING_SETTLE_MS)))]);
    clearTimeout(timer);
  }

  /** The doorbell, while two or more readers share the hub. */
  private async runDoorbell(): Promise<void> {
    while (this.readers.size >= 2) {
      const doorbell = this.blocking;
      // A solo read cut short (modeChanged) must have returned before the connection is used.
      if (this.soloRead) await this.soloRead.catch(() => undefined);
      const watched = this.collect();
      if (!doorbell || watched.size === 0 || this.readers.size < 2) {
        if (this.readers.size >= 2) await this.idle(DOORBELL_BLOCK_MS);
        continue;
      }
      this.wakePending = false;
      let reply: [string, [string, string[]][]][] | null;
      try {
        this.inFlight = watched;
        const read = doorbell.xread('COUNT', 1, 'BLOCK', DOORBELL_BLOCK_MS, 'STREAMS', ...watched.keys(), ...watched.values()) as Promise<
          typeof reply
        >;
        reply = await withReadDeadline(doorbell, read, DOORBELL_BLOCK_MS + DOORBELL_GRACE_MS, 'the doorbell read');
      } catch (error) {
        this.inFlight = undefined;
        if (this.blocking !== doorbell) continue; // closed: the last reader left
        // Past its deadline the socket was reset, and ioredis would send the 5 s XREAD again after
        // the reconnect, ahead of whatever the connection carries next (a solo read, once one
        // member is left, would wait behind it past its own deadline, again and again): the
        // doorbell moves to a new connection instead, and the old one is closed without a resend.
        if (error instanceof ReadDeadlineError) this.replaceBlocking(doorbell);
        // A ring may have been lost with the reply: every watched stream is rung (read once).
        await this.ringAll(new Map([...watched.keys()].map((stream) => [stream, ''])));
        await this.idle(DOORBELL_RETRY_MS);
        continue;
      } finally {
        this.inFlight = undefined;
      }
      if (!reply || reply.length === 0) continue; // timed out, or cut short for a new watched set
      const rings = new Map<string, string>();
      for (const [stream, entries] of reply) {
        const first = entries?.[0]?.[0];
        if (first !== undefined) rings.set(String(stream), String(first));
      }
      // The rung readers read before the doorbell blocks again, so it includes what they read to the end.
      await this.ringAll(rings);
    }
  }
}
