import { Redis } from 'ioredis';
import { StreamProducer } from '@redis-stream-coordinator/core';
import { TcpProxy } from '../support/tcp-proxy';
import type { Produced } from './checker';

interface LoadHost {
  readonly server: { port: number; url: string };
  readonly streamPrefix: string;
}

export interface LoadOptions {
  keyPrefix: string;
  keys: number;
  /** Entries per second. */
  rate: number;
  /** Write through a TCP proxy of its own (so a fault can hold its writes in flight). */
  viaProxy: boolean;
  /** How often a batch is sent (ms). Default 20. */
  tickMs?: number;
  /** Distinct keys per batch (each repeated to fill the batch). Default 5. */
  keysPerBatch?: number;
}

/** One entry's outcome as `sendBatch` reports it: written (with id) or refused (with why). */
interface Outcome {
  shardIndex?: number;
  id?: string;
  error?: unknown;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Writes keyed entries with per-key sequence numbers, in batches every 20 ms, and keeps what each
 * write returned (the checker's "produced"). A batch is retried the way docs/producer.md says: when
 * `sendBatch` reports per entry, the entries that were not written are sent again, in order; when it
 * rejects as a whole, the whole batch is sent again (the sequence numbers stay, so a copy that did
 * land is a duplicate in the stream, and a reordered copy is an order violation the checker reports).
 */
export class LoadProducer {
  readonly produced: Produced[] = [];
  /** Failed `sendBatch` calls and entries refused one by one (per-entry results). */
  failedBatches = 0;
  refusedEntries = 0;
  private running = true;
  /** While set (performance.now()), no new batch is started: the shards go quiet. */
  private quietUntil = 0;
  private loop: Promise<void> | undefined;

  private constructor(
    private readonly connection: Redis,
    readonly proxy: TcpProxy | undefined,
  ) {}

  static async start(host: LoadHost, options: LoadOptions): Promise<LoadProducer> {
    const proxy = options.viaProxy ? await TcpProxy.start(host.server.port) : undefined;
    const connection = new Redis(proxy?.url ?? host.server.url, { maxRetriesPerRequest: 1, retryStrategy: () => 50 });
    connection.on('error', () => undefined);
    const load = new LoadProducer(connection, proxy);
    load.loop = load.run(new StreamProducer(connection, { streamPrefix: host.streamPrefix }), options);
    return load;
  }

  /** No new writes for `ms`: every shard goes quiet (what a lost read reply on a quiet shard needs). */
  quiet(ms: number): void {
    this.quietUntil = performance.now() + ms;
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
        const key = `${options.keyPrefix}-${(round * width + (i % width)) % options.keys}`;
        const seq = (next.get(key) ?? 0) + 1;
        next.set(key, seq);
        return { key, payload: { seq } };
      });
      round += 1;
      while (batch.length > 0) {
        try {
          const results = (await producer.sendBatch(batch)) as Outcome[];
          const at = performance.timeOrigin + performance.now();
          const retry: typeof batch = [];
          results.forEach((r, i) => {
            if (r.error === undefined && r.id !== undefined) this.produced.push({ id: r.id, shard: r.shardIndex!, key: batch[i].key, seq: batch[i].payload.seq, at });
            else retry.push(batch[i]);
          });
          this.refusedEntries += retry.length;
          batch = retry;
        } catch {
          this.failedBatches += 1;
        }
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
