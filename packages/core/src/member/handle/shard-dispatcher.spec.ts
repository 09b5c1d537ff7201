import { EventEmitter } from 'node:events';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { StreamMessage } from '../../protocol/entry-format';
import type { ShardClient } from '../../redis/shard-client';
import { type BatchMemberOptions, type CoordinatedMemberOptions, resolveMemberOptions } from '../member-options';
import { type PollerEvents, ShardSet, type ShardState } from '../shard-state';
import type { AckBatcher } from './ack-batcher';
import { ShardDispatcher } from './shard-dispatcher';

// The dispatcher's scheduling rules, without Redis: a fake shard client (dead letters), a fake ack
// batcher, and vitest's fake clock (timers and Date.now), so backoffs and stall bounds pass at once.

/** A handler call as the harness sees it: `shard:entry#attempt` (`entry`: `a`, `b`, …; with batches `a+b`). */
interface Call {
  label: string;
  settle: (failure?: Error) => void;
}

interface HarnessOptions {
  shards?: number;
  lanes?: number;
  runtimeMaxConcurrency?: number;
  maxAttempts?: number;
  retryBackoffMs?: number;
  handlerStallMs?: number;
  batch?: { maxSize: number };
}

/**
 * A dispatcher over `shards` reading shards, whose handler calls wait until the test settles them.
 * Entries are named by letter (`enqueue(0, 'a', 'b')`, or `enqueue(0, 'a@k1')` with routing key k1).
 */
function aDispatcher(given: HarnessOptions = {}) {
  const calls: Call[] = [];
  const open = new Map<string, Call>();
  const names = new Map<string, string>(); // entry id -> its letter
  const label = (m: StreamMessage) => `${m.shardIndex}:${names.get(m.id)}#${m.deliveryCount}`;
  const call = (text: string) =>
    new Promise<void>((resolve, reject) => {
      const c: Call = {
        label: text,
        settle: (failure) => {
          open.delete(text);
          if (failure) reject(failure);
          else resolve();
        },
      };
      calls.push(c);
      open.set(text, c);
    });
  const base = {
    streamPrefix: 'spec',
    consumerGroup: 'group',
    telemetry: false,
    maxAttempts: given.maxAttempts ?? 3,
    retryBackoffMs: given.retryBackoffMs ?? 1000,
    handlerStallMs: given.handlerStallMs ?? 60_000,
    lanes: given.lanes,
    runtimeMaxConcurrency: given.runtimeMaxConcurrency ?? 1,
  };
  const options = resolveMemberOptions(
    given.batch
      ? ({
          ...base,
          batch: given.batch,
          handler: (messages: StreamMessage[]) =>
            call(
              messages
                .map(label)
                .join('+')
                .replace(/\+\d+:/g, '+'),
            ),
        } as BatchMemberOptions)
      : ({ ...base, handler: (message: StreamMessage) => call(label(message)) } as CoordinatedMemberOptions),
  );
  const shards = new ShardSet();
  for (let i = 0; i < (given.shards ?? 2); i++) shards.add(i, 1).phase = 'reading';
  let failing = new Set<string>(); // letters whose dead letter cannot be written ('*': every one)
  const deadLetters: string[] = [];
  const client = {
    deadLetter: async (shardIndex: number, _epoch: number, entry: { id: string }) => {
      if (failing.has('*') || failing.has(names.get(entry.id) ?? '')) throw new Error('WRONGTYPE');
      deadLetters.push(`${shardIndex}:${names.get(entry.id)}`);
      return `${deadLetters.length}-0`;
    },
  } as unknown as ShardClient;
  const acked: string[] = [];
  const acks = {
    queue: (state: ShardState, id: string | string[]) => {
      for (const one of Array.isArray(id) ? id : [id]) acked.push(`${state.index}:${names.get(one)}`);
    },
  } as unknown as AckBatcher;
  const events = new EventEmitter<PollerEvents>();
  const errors: string[] = [];
  events.on('error', (error) => errors.push(error.message));
  let mayStart = true;
  const dispatcher = new ShardDispatcher(
    shards,
    client,
    acks,
    events,
    options,
    () => mayStart,
    () => undefined,
  );
  let seq = 0;
  return {
    dispatcher,
    shards,
    calls,
    acked,
    deadLetters,
    errors,
    /** Queues entries on a shard (in ID order after what it holds), dispatches, and lets what starts run. */
    async enqueue(shardIndex: number, ...letters: string[]) {
      const entries = letters.map((spec) => {
        const [letter, key] = spec.split('@');
        const id = `${++seq}-0`;
        names.set(id, letter);
        const fields = ['p', JSON.stringify(letter), ...(key ? ['k', key] : [])];
        return { entry: { id, fields }, deliveries: 1 };
      });
      shards.enqueue(shards.get(shardIndex)!, entries);
      dispatcher.dispatch();
      await vi.advanceTimersByTimeAsync(0);
    },
    /** Handler calls started and not settled, in the order they started. */
    running: () => [...open.keys()],
    /** Settles a running call (with a failure, it fails its attempt), then lets what follows run. */
    async settle(text: string, failure?: Error) {
      const c = open.get(text);
      if (!c) throw new Error(`${text} is not running (running: ${[...open.keys()].join(', ') || 'nothing'})`);
      c.settle(failure);
      await vi.advanceTimersByTimeAsync(0);
    },
    /** Lets `ms` pass on the fake clock (backoffs, stall bounds). */
    advance: (ms: number) => vi.advanceTimersByTimeAsync(ms),
    /** The dead letters of these entries fail from now on (`'*'`: every one); none, when called without any. */
    failDeadLetters(...letters: string[]) {
      failing = new Set(letters);
    },
    setMayStart(may: boolean) {
      mayStart = may;
      if (may) dispatcher.dispatch();
    },
    problems: () => shards.all().flatMap((s) => [...s.problems.values()]),
  };
}

const boom = () => new Error('boom');

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('ShardDispatcher: a worker waiting is free for other shards (SPEC 10.8)', () => {
  it('a backoff on shard 0 frees the worker for shard 1', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1 });
    await h.enqueue(0, 'a');
    await h.enqueue(1, 'b');
    expect(h.running()).toEqual(['0:a#1']);
    await h.settle('0:a#1', boom());
    expect(h.running()).toEqual(['1:b#1']);
    expect(h.dispatcher.activeHandlers).toBe(1);
    await h.settle('1:b#1');
    expect(h.dispatcher.activeHandlers).toBe(0); // a backoff is not a running handler
    await h.advance(1000);
    expect(h.running()).toEqual(['0:a#2']);
  });

  it('a retry whose backoff ended waits for a free worker: runtimeMaxConcurrency bounds the calls running', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1 });
    await h.enqueue(0, 'a');
    await h.settle('0:a#1', boom());
    await h.enqueue(1, 'b');
    expect(h.running()).toEqual(['1:b#1']);
    await h.advance(1000); // a's backoff is over while b holds the only worker
    expect(h.running()).toEqual(['1:b#1']);
    await h.settle('1:b#1');
    expect(h.running()).toEqual(['0:a#2']);
  });

  it('a failing dead-letter write on shard 0 holds its shard, not the worker', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1, maxAttempts: 1 });
    h.failDeadLetters('a');
    await h.enqueue(0, 'a', 'c');
    await h.settle('0:a#1', boom());
    await h.enqueue(1, 'b');
    expect(h.running()).toEqual(['1:b#1']);
    expect(h.problems()).toEqual([expect.stringMatching(/^shard 0: writing the dead letter of .* failed/)]);
    await h.settle('1:b#1');
    expect(h.running()).toEqual([]); // c waits behind a's dead letter
    h.failDeadLetters();
    await h.advance(5000);
    expect(h.deadLetters).toEqual(['0:a']);
    expect(h.problems()).toEqual([]);
    expect(h.running()).toEqual(['0:c#1']);
  });

  it('an undecodable entry on shard 0 waits for its dead letter without the worker', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1 });
    h.failDeadLetters('*');
    const state = h.shards.get(0)!;
    h.shards.enqueue(state, [{ entry: { id: '100-0', fields: ['x', 'y'] }, deliveries: 1 }]);
    await h.enqueue(1, 'b');
    expect(h.running()).toEqual(['1:b#1']);
    expect(state.work.size).toBe(1); // shard 0's lane is held by the dead letter it cannot write
  });

  it('a batch backoff on shard 0 frees the worker for shard 1', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1, batch: { maxSize: 10 } });
    await h.enqueue(0, 'a', 'c');
    await h.enqueue(1, 'b');
    expect(h.running()).toEqual(['0:a#1+c#1']);
    await h.settle('0:a#1+c#1', boom());
    expect(h.running()).toEqual(['1:b#1']);
    await h.settle('1:b#1');
    await h.advance(1000);
    expect(h.running()).toEqual(['0:a#2+c#2']);
  });
});

describe('ShardDispatcher: order holds (SPEC 5)', () => {
  it("without lanes, a shard's later entries wait behind its retrying entry, a free worker or not", async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 4 });
    await h.enqueue(0, 'a', 'b');
    await h.settle('0:a#1', boom());
    expect(h.running()).toEqual([]);
    await h.advance(1000);
    await h.settle('0:a#2');
    expect(h.running()).toEqual(['0:b#1']);
  });

  it('a key waiting out its backoff keeps later entries of that key waiting, not those of other keys', async () => {
    const h = aDispatcher({ lanes: 2, runtimeMaxConcurrency: 2 });
    await h.enqueue(0, 'a@k1', 'b@k1', 'c@k2', 'd@k2');
    expect(h.running()).toEqual(['0:a#1', '0:c#1']);
    await h.settle('0:a#1', boom());
    expect(h.running()).toEqual(['0:c#1']); // b (key k1) waits for a's retry
    await h.settle('0:c#1');
    expect(h.running()).toEqual(['0:d#1']);
    await h.advance(1000);
    expect(h.running()).toEqual(['0:d#1', '0:a#2']);
    await h.settle('0:a#2');
    expect(h.running()).toEqual(['0:d#1', '0:b#1']);
  });

  it("with lanes, each key's failing dead letter is its own problems line, cleared when that one is written", async () => {
    const h = aDispatcher({ lanes: 2, runtimeMaxConcurrency: 2, maxAttempts: 1 });
    h.failDeadLetters('a', 'b');
    await h.enqueue(0, 'a@k1', 'b@k2', 'c@k1');
    await h.settle('0:a#1', boom());
    await h.settle('0:b#1', boom());
    expect(h.problems()).toHaveLength(2);
    h.failDeadLetters('a');
    await h.advance(5000);
    expect(h.deadLetters).toEqual(['0:b']);
    expect(h.problems()).toEqual([expect.stringMatching(/writing the dead letter of 1-0 failed/)]);
    expect(h.running()).toEqual([]); // c (key k1) waits for a's dead letter
  });

  it('no two handlers at once on a shard without lanes, whatever the workers', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 8 });
    await h.enqueue(0, 'a', 'b', 'c');
    expect(h.running()).toEqual(['0:a#1']);
    await h.settle('0:a#1');
    expect(h.running()).toEqual(['0:b#1']);
  });
});

describe('ShardDispatcher: fairness', () => {
  it('round-robin: no shard starves; resumed work goes in its shard turn, before its queue', async () => {
    const h = aDispatcher({ shards: 3, runtimeMaxConcurrency: 1 });
    await h.enqueue(0, 'a1', 'a2');
    await h.enqueue(1, 'b1', 'b2');
    await h.enqueue(2, 'c1', 'c2');
    const order: string[] = [];
    while (h.running().length > 0) {
      const [next] = h.running();
      order.push(next);
      await h.settle(next);
    }
    expect(order).toEqual(['0:a1#1', '1:b1#1', '2:c1#1', '0:a2#1', '1:b2#1', '2:c2#1']);
  });
});

describe('ShardDispatcher: when handlers may not start', () => {
  it('a retry due while handlers may not start (paused, lease unsafe) holds no worker and runs once they may', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1 });
    await h.enqueue(0, 'a');
    await h.settle('0:a#1', boom());
    h.setMayStart(false);
    await h.advance(5000);
    expect(h.running()).toEqual([]);
    expect(h.dispatcher.activeHandlers).toBe(0);
    h.setMayStart(true);
    await h.advance(0);
    expect(h.running()).toEqual(['0:a#2']);
  });

  it('a retry waiting for a worker when its shard is released ends: its lane is free, nothing runs', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1 });
    await h.enqueue(0, 'a');
    await h.enqueue(1, 'b');
    await h.settle('0:a#1', boom());
    await h.advance(1000); // a's backoff is over; b holds the worker
    const state = h.shards.get(0)!;
    expect(state.resuming).toHaveLength(1);
    h.shards.release(state);
    await h.advance(0);
    expect(state.work.size).toBe(0);
    await h.settle('1:b#1');
    expect(h.running()).toEqual([]);
  });
});

describe('ShardDispatcher: a call past handlerStallMs (SPEC 10.8)', () => {
  it('is one error and a problems line naming shard and entry until it ends, and gives its worker back', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1, handlerStallMs: 1000 });
    await h.enqueue(0, 'a', 'c');
    await h.enqueue(1, 'b');
    await h.advance(999);
    expect(h.running()).toEqual(['0:a#1']);
    expect(h.problems()).toEqual([]);
    await h.advance(1);
    expect(h.running()).toEqual(['0:a#1', '1:b#1']);
    expect(h.problems()).toEqual([expect.stringMatching(/^shard 0: the handler of 1-0 has run for more than handlerStallMs \(1000 ms\)/)]);
    expect(h.errors).toHaveLength(1);
    expect(h.dispatcher.activeHandlers).toBe(2); // the stalled call still runs
    await h.settle('1:b#1');
    await h.advance(5000);
    expect(h.errors).toHaveLength(1); // once per stall, not per check
    expect(h.running()).toEqual(['0:a#1']); // c waits for a
    await h.settle('0:a#1');
    expect(h.problems()).toEqual([]);
    expect(h.running()).toEqual(['0:c#1']);
    expect(h.dispatcher.activeHandlers).toBe(1);
  });

  it('a retry after a stalled call that failed is followed again from its own start', async () => {
    const h = aDispatcher({ runtimeMaxConcurrency: 1, handlerStallMs: 1000 });
    await h.enqueue(0, 'a');
    await h.advance(1100);
    expect(h.errors).toHaveLength(1);
    await h.settle('0:a#1', boom());
    expect(h.problems()).toEqual([]);
    await h.advance(1000);
    expect(h.running()).toEqual(['0:a#2']);
    await h.advance(999);
    expect(h.errors).toHaveLength(1);
    await h.advance(1);
    expect(h.errors).toHaveLength(2);
  });
});

describe('ShardDispatcher: handler calls running at once stay bounded whatever stalls (SPEC 10.7, 10.8)', () => {
  it('at most runtimeMaxConcurrency calls run stalled: past that a stalled call keeps its worker and new work waits, so at most twice runtimeMaxConcurrency calls run', async () => {
    const h = aDispatcher({ shards: 4, runtimeMaxConcurrency: 1, handlerStallMs: 1000 });
    await h.enqueue(0, 'a');
    await h.enqueue(1, 'b');
    await h.enqueue(2, 'c');
    await h.enqueue(3, 'd');
    await h.advance(1000);
    expect(h.running()).toEqual(['0:a#1', '1:b#1']); // a stalled and gave its worker to b
    await h.advance(5000);
    // b stalled too, but one call already runs stalled: b keeps its worker, c and d wait for it.
    expect(h.running()).toEqual(['0:a#1', '1:b#1']);
    expect(h.dispatcher.activeHandlers).toBe(2);
    expect(h.problems()).toEqual([
      expect.stringMatching(/^shard 0: the handler of 1-0 has run for more than handlerStallMs .*its worker is free for them/),
      expect.stringMatching(/^shard 1: the handler of 2-0 has run for more than handlerStallMs .*keeps its worker/),
    ]);
    expect(h.errors).toHaveLength(2);
    await h.settle('0:a#1');
    // a's end frees no worker (it held none), but b may give its own back now: c starts.
    expect(h.running()).toEqual(['1:b#1', '2:c#1']);
    expect(h.dispatcher.activeHandlers).toBe(2);
    await h.settle('1:b#1');
    expect(h.running()).toEqual(['2:c#1']);
    await h.settle('2:c#1');
    expect(h.running()).toEqual(['3:d#1']);
  });
});
