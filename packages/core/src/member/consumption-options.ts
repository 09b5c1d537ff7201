import { checkOption, OPTION_RANGES } from '../protocol/option-ranges';

/** The most lanes one shard may run (each a handler call in flight). */
export const MAX_LANES: number = OPTION_RANGES['member.lanes'].max;
/**
 * The most entries one read takes from a shard (`batchSize`) and one batch call gets (`batch.maxSize`,
 * never more than `batchSize`).
 */
export const MAX_BATCH_SIZE: number = OPTION_RANGES['member.batchSize'].max;

/** Batch handlers (`batch` member option): how many entries one call gets, and how long a short batch waits to fill. */
export interface BatchOptions {
  /** At most this many entries of one shard per call. */
  maxSize: number;
  /**
   * How long fewer than `maxSize` queued entries wait for more before the handler gets them.
   * Default 0: what is queued goes at once (a busy shard fills batches on its own).
   */
  maxWaitMs?: number;
}

/** How a member hands entries to its handler: lanes, batches, acknowledgement mode. */
export interface ResolvedConsumptionOptions {
  lanes: number;
  ackMode: 'auto' | 'manual';
  retryMode: 'in-place' | 'deferred';
  deferredOrder: 'key' | 'none';
  ackTimeoutMs: number;
  batch: Required<BatchOptions> | undefined;
}

interface ConsumptionInput {
  lanes?: unknown;
  ackMode?: unknown;
  retryMode?: unknown;
  deferredOrder?: unknown;
  ackTimeoutMs?: unknown;
  batch?: unknown;
}

/**
 * Checks `lanes`, `ackMode`, `retryMode`, `deferredOrder`, `ackTimeoutMs` and `batch`, alone and together: a batch is one shard's
 * entries in order, acknowledged as one, so it runs on no lanes and takes no manual acks.
 */
export function resolveConsumptionOptions(options: ConsumptionInput): ResolvedConsumptionOptions {
  const lanes = options.lanes ?? 1;
  checkOption('member.lanes', lanes);
  const ackMode = options.ackMode ?? 'auto';
  if (ackMode !== 'auto' && ackMode !== 'manual') throw new TypeError(`ackMode must be 'auto' or 'manual', got ${JSON.stringify(ackMode)}`);
  if (options.ackTimeoutMs !== undefined && ackMode !== 'manual') {
    throw new TypeError(
      `ackTimeoutMs (${JSON.stringify(options.ackTimeoutMs)}) applies to ackMode 'manual' only; ackMode is 'auto' (use handlerTimeoutMs)`,
    );
  }
  const retryMode = options.retryMode ?? 'in-place';
  if (retryMode !== 'in-place' && retryMode !== 'deferred')
    throw new TypeError(`retryMode must be 'in-place' or 'deferred', got ${JSON.stringify(retryMode)}`);
  const deferredOrder = options.deferredOrder ?? 'key';
  if (deferredOrder !== 'key' && deferredOrder !== 'none')
    throw new TypeError(`deferredOrder must be 'key' or 'none', got ${JSON.stringify(deferredOrder)}`);
  const ackTimeoutMs = options.ackTimeoutMs ?? 30_000;
  checkOption('member.ackTimeoutMs', ackTimeoutMs);
  let batch: Required<BatchOptions> | undefined;
  if (options.batch !== undefined) {
    const given = options.batch as Partial<BatchOptions> | null;
    if (given === null || typeof given !== 'object' || Array.isArray(given))
      throw new TypeError(`batch must be an object { maxSize, maxWaitMs }, got ${JSON.stringify(given)}`);
    batch = { maxSize: given.maxSize as number, maxWaitMs: given.maxWaitMs ?? 0 };
    checkOption('member.batch.maxSize', batch.maxSize);
    checkOption('member.batch.maxWaitMs', batch.maxWaitMs);
    if (lanes !== 1)
      throw new TypeError(
        `batch and lanes (${JSON.stringify(lanes)}) cannot be combined: a batch is one shard's entries in order, acknowledged as one; use lanes or batch`,
      );
    if (ackMode === 'manual')
      throw new TypeError(
        "batch and ackMode 'manual' cannot be combined: a batch is acknowledged as one when its handler resolves (throw a BatchError to fail part of it)",
      );
    if (retryMode === 'deferred')
      throw new TypeError(
        "batch and retryMode 'deferred' cannot be combined: a batch is retried as one, in place (docs/runtime.md, Deferred retries)",
      );
  }
  return { lanes: lanes as number, ackMode, retryMode, deferredOrder, ackTimeoutMs: ackTimeoutMs as number, batch };
}
