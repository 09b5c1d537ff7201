import { type RedisClient, StreamProducer } from '@redis-stream-coordinator/core';
import type { TcpProxy } from '../support/tcp-proxy';
import type { Produced } from './checker';
import type { ChaosTarget } from './target';

interface LoadHost {
  readonly target: ChaosTarget;
  readonly streamPrefix: string;
}

export interface LoadOptions {
  keyPrefix: string;
  keys: number;
  /** Entries per second. */
  rate: number;
  /** Write through a TCP proxy of its own (so a fault can hold its writes in flight); single node only, ignored on a cluster. */
  viaProxy: boolean;
  /** How often a batch is sent (ms). Default 20. */
  tickMs?: number;
  /** Distinct keys per batch (each repeated to fill the batch). Default 5. */
  keysPerBatch?: number;
  /**
   * Every how-manyth key is delayed (0: none): all its entries are sent with the one `delayMs` of
   * that key (`delayedMsOf`), so they come out of the schedule in the order they were sent and the
   * key's order holds by construction (docs/runtime.md, Delayed delivery).
   */
  delayedEvery?: number;
}

/** The delays a delayed key may have: each key keeps one for the whole run. */
const DELAYS_MS = [150, 400, 1000];

/** The constant delay of key number `index` (the suffix of its name) when it is of the delayed class, else 0. */
export function delayedMsOf(index: number, every: number): number {
  if (every <= 0 || index % every !== every - 1) return 0;
  return DELAYS_MS[Math.floor(index / every) % DELAYS_MS.length];
}

/** One written entry as `sendBatch` reports it. */
interface Outcome {
  shardIndex: number;
  id: string;
  /** A delayed entry's due time (epoch ms on Redis' clock); its `id` is then its schedule id. */
  dueAt?: number;
}

/** The shape of a `PartialBatchError` (SPEC 9.5, d998fcf), read by shape so this compiles before and after it exists. */
interface PartialBatch {
  written: (Outcome & { index: number })[];
  failed: { index: number; maybeWritten: boolean }[];
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Writes keyed entries with per-key sequence numbers, in batches every 20 ms, and keeps what each
 * write returned (the checker's "produced"). A batch is retried the way docs/producer.md says: when
 * `sendBatch` rejects with per-entry results (`PartialBatchError`), the entries not written are sent
 * again in order; when it rejects as a whole, the whole batch is sent again (the sequence numbers
 * stay, so a copy that did land is a key written twice, which the checker reports unless the
 * reply was lost and at-least-once allows it).
 */
export class LoadProducer {
  readonly produced: Produced[] = [];
  /** Failed `sendBatch` calls and entries refused one by one (per-entry results). */
  failedBatches = 0;
  refusedEntries = 0;
  /** When the last write was confirmed (performance.now()), and why the latest send failed: for a stalled producer's report. */
  lastWrittenAt = performance.now();
  lastError: string | undefined;
  /** Whether a send is awaiting its answer now, and since when (a send that never answers stalls the producer). */
  sendingSince: number | undefined;
  /** "key#seq" of entries sent again after a reply that never came: a second copy is allowed. */
  readonly mayBeTwice = new Set<string>();
  private running = true;
  /** While set (performance.now()), no new batch is started: the shards go quiet. */
  private quietUntil = 0;
  private loop: Promise<void> | undefined;

  private constructor(
    private readonly connection: RedisClient,
    readonly proxy: TcpProxy | undefined,
  ) {}

  static async start(host: LoadHost, options: LoadOptions): Promise<LoadProducer> {
    const proxy = options.viaProxy ? await host.target.proxy() : undefined;
    const connection = host.target.connect(proxy);
    const load = new LoadProducer(connection, proxy);
    // On a cluster a send resolves once a replica has it too: a failover must lose none of them.
    const producer = new StreamProducer(connection, { streamPrefix: host.streamPrefix, waitForReplicas: host.target.replicaWait });
    load.loop = load.run(producer, options);
    return load;
  }

  /** No new writes for `ms`: every shard goes quiet (what a lost read reply on a quiet shard needs). */
  quiet(ms: number): void {
    this.quietUntil = performance.now() + ms;
  }

  /** Why nothing was written for longer than `ms` (undefined while it writes, or keeps quiet on purpose). */
  stalled(ms: number): string | undefined {
    const now = performance.now();
    if (!this.running || now < this.quietUntil || now - Math.max(this.lastWrittenAt, this.quietUntil) < ms) return undefined;
    const sending =
      this.sendingSince === undefined ? 'no send under way' : `a send awaiting its answer for ${Math.round(now - this.sendingSince)} ms`;
    return `nothing written for ${Math.round(now - this.lastWrittenAt)} ms (${this.failedBatches} failed sends in all; ${sending}; last error: ${this.lastError ?? 'none'})`;
  }

  private async run(producer: StreamProducer, options: LoadOptions): Promise<void> {
    const next = new Map<string, number>();
    const tickMs = options.tickMs ?? 20;
    const perTick = Math.max(1, Math.round((options.rate * tickMs) / 1000));
    const width = Math.min(options.keysPerBatch ?? 5, perTick);
    let round = 0;
    while (this.running) {
      if (performance.now() < this.quietUntil) {
        await sleep(tickMs);
        continue;
      }
      let batch = Array.from({ length: perTick }, (_, i) => {
        // Each key several times per batch (at most five keys a batch): a batch written only in part and sent again
        // whole would write a key's entries twice, which the checker reports.
        const index = (round * width + (i % width)) % options.keys;
        const key = `${options.keyPrefix}-${index}`;
        const seq = (next.get(key) ?? 0) + 1;
        next.set(key, seq);
        const delayMs = delayedMsOf(index, options.delayedEvery ?? 0);
        return delayMs > 0 ? { key, payload: { seq }, delayMs } : { key, payload: { seq } };
      });
      round += 1;
      while (batch.length > 0) {
        const record = (index: number, r: Outcome) =>
          this.produced.push({
            id: r.id!,
            shard: r.shardIndex!,
            key: batch[index].key,
            seq: batch[index].payload.seq,
            at: performance.timeOrigin + performance.now(),
            ...(r.dueAt === undefined ? {} : { dueAt: r.dueAt }),
          });
        try {
          this.sendingSince = performance.now();
          const results = (await producer.sendBatch(batch)) as Outcome[];
          for (const [i, r] of results.entries()) record(i, r);
          this.lastWrittenAt = performance.now();
          batch = [];
        } catch (error) {
          this.failedBatches += 1;
          this.lastError = `${(error as Error).name}: ${(error as Error).message}`.slice(0, 300);
          const partial0 = error as Partial<PartialBatch>;
          if (Array.isArray(partial0.written) && partial0.written.length > 0) this.lastWrittenAt = performance.now();
          const partial = error as Partial<PartialBatch>;
          if (Array.isArray(partial.written) && Array.isArray(partial.failed)) {
            // Per-entry results (docs/producer.md): keep what landed, send the rest again in order.
            for (const w of partial.written) record(w.index, w);
            for (const f of partial.failed) if (f.maybeWritten) this.mayBeTwice.add(`${batch[f.index].key}#${batch[f.index].payload.seq}`);
            this.refusedEntries += partial.failed.length;
            batch = partial.failed.map((f) => batch[f.index]);
          } else if (!/^OOM/.test((error as Error).message)) {
            // The whole batch failed without a word on which entries landed (a connection lost):
            // sending it again may write some twice, which at-least-once allows.
            for (const m of batch) this.mayBeTwice.add(`${m.key}#${m.payload.seq}`);
          }
          // An OOM rejection of the whole batch hides which entries were written (before d998fcf):
          // sent again whole, as the old docs said; the checker reports what got written twice.
        }
        this.sendingSince = undefined;
        if (batch.length > 0) {
          if (!this.running) break;
          await sleep(50);
        }
      }
      await sleep(tickMs);
    }
  }

  async stop(): Promise<void> {
    this.running = false;
    await this.loop?.catch(() => undefined);
    this.connection.disconnect();
    await this.proxy?.stop();
  }
}
