import { describe, expect, it } from 'vitest';
import {
  CoordinatedMember,
  CoordinatorAdmin,
  DEAD_LETTER_STACK_MAX_CHARS,
  type DeadLetterEvent,
  type DeadLetterNotice,
  KeyBuilder,
  REPLAY_HEADER,
  StreamProducer,
  shardForKey,
  type StreamMessage,
} from '@redis-stream-coordinator/core';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// The member's dead-letter options (docs/runtime.md, Dead letters): a destination name, a maximum length, errors
// not worth retrying, and a hook called after each dead letter is written.
const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const keys = new KeyBuilder();
const admin = () => new CoordinatorAdmin(redis.client());

class ValidationError extends Error {
  override name = 'ValidationError';
}

function collect(member: CoordinatedMember<KeyedPayload>) {
  const deadLetters: DeadLetterEvent[] = [];
  const errors: Error[] = [];
  member.on('dead-letter', (event) => deadLetters.push(event));
  member.on('error', (error) => errors.push(error));
  return { deadLetters, errors };
}

const send = (streamPrefix: string, messages: { key: string; payload: KeyedPayload }[]) =>
  new StreamProducer(redis.client(), { streamPrefix }).sendBatch(messages);

describe('validation', () => {
  const base = { streamPrefix: 'valid', consumerGroup: 'g', handler: () => undefined };
  const make = (deadLetter: unknown) => () => new CoordinatedMember(redis.client(), { ...base, deadLetter } as never);

  it('names the option and the value', () => {
    expect(make(null)).toThrow('deadLetter must be an object, got null');
    expect(make('dlq')).toThrow('deadLetter must be an object, got string');
    expect(make({ stream: 'a:b' })).toThrow('deadLetter.stream "a:b" is invalid: use 1-100 characters of A-Z a-z 0-9 . _ -');
    expect(make({ stream: '' })).toThrow('deadLetter.stream "" is invalid');
    expect(make({ maxLen: 0 })).toThrow('deadLetter.maxLen must be an integer from 1 to 1000000000, got 0');
    expect(make({ maxLen: 2.5 })).toThrow('deadLetter.maxLen must be an integer from 1 to 1000000000, got 2.5');
    expect(make({ nonRetryable: true })).toThrow(
      'deadLetter.nonRetryable must be a function (error, message) => boolean, got boolean true',
    );
    expect(make({ nonRetryableErrors: ValidationError })).toThrow(
      'deadLetter.nonRetryableErrors must be an array of error classes, got function',
    );
    expect(make({ nonRetryableErrors: [ValidationError, 'TypeError'] })).toThrow(
      'deadLetter.nonRetryableErrors[1] must be a class (a constructor), got string "TypeError"',
    );
    expect(make({ onDeadLetter: 'alert' })).toThrow('deadLetter.onDeadLetter must be a function, got string "alert"');
    expect(make({ maxLength: 10 })).toThrow(
      'deadLetter.maxLength is not an option (known: stream, maxLen, nonRetryable, nonRetryableErrors, onDeadLetter, includeStack)',
    );
    expect(make({ includeStack: 'yes' })).toThrow('deadLetter.includeStack must be a boolean, got string "yes"');
    expect(
      make({
        stream: 'billing-dlq',
        maxLen: 10,
        nonRetryableErrors: [ValidationError],
        nonRetryable: () => false,
        onDeadLetter: () => undefined,
      }),
    ).not.toThrow();
  });
});

describe('the stack of the failure', () => {
  it('is kept in the dead letter, cut to DEAD_LETTER_STACK_MAX_CHARS; with includeStack: false, or for a thrown value that is no Error, there is none', async () => {
    const streamPrefix = uniqueName('dlq-stack');
    const deep = new ValidationError('deep');
    deep.stack = `ValidationError: deep\n${'    at frame (file.ts:1:1)\n'.repeat(500)}`;
    const failures: Record<string, unknown> = { plain: new ValidationError('no customer'), deep, thrown: 'a string' };
    const run = async (consumerGroup: string, includeStack?: boolean) => {
      const member = aMember({
        streamPrefix,
        consumerGroup,
        shardCount: 1,
        maxAttempts: 1,
        deadLetter: includeStack === undefined ? {} : { includeStack },
        handler: (message) => {
          throw failures[message.key!];
        },
      });
      const { deadLetters } = collect(member);
      await member.start();
      await pollUntil(`${consumerGroup}: three dead letters`, async () => deadLetters.length === 3);
      await member.stop();
      return Object.fromEntries(
        (await admin().readDeadLetters(streamPrefix, consumerGroup)).map((letter) => [letter.key ?? '', letter] as const),
      );
    };
    await admin().createStream({ streamPrefix, shardCount: 1 });
    await send(
      streamPrefix,
      ['plain', 'deep', 'thrown'].map((key, seq) => ({ key, payload: { seq } })),
    );

    const kept = await run('keeps');
    expect(kept.plain.error).toBe('ValidationError: no customer');
    expect(kept.plain.stack).toMatch(/^ValidationError: no customer\n\s+at /);
    expect(kept.deep.stack).toHaveLength(DEAD_LETTER_STACK_MAX_CHARS);
    expect(kept.deep.stack!.endsWith('…')).toBe(true);
    expect(kept.thrown).toMatchObject({ error: 'a string', stack: undefined });

    const left = await run('leaves', false);
    expect(Object.values(left).map((letter) => letter.stack)).toEqual([undefined, undefined, undefined]);
  });
});

describe('destination name', () => {
  it('writes to the named per-shard stream in the shard slot; the admin API lists, replays and purges it by that name', async () => {
    const streamPrefix = uniqueName('dlq-name');
    const member = aMember({
      streamPrefix,
      shardCount: 2,
      maxAttempts: 1,
      deadLetter: { stream: 'billing-dlq' },
      handler: () => {
        throw new Error('poison');
      },
    });
    const { deadLetters } = collect(member);
    await member.start();
    const [written] = await send(streamPrefix, [{ key: 'a', payload: { seq: 1 } }]);
    await pollUntil('the entry dead-lettered', async () => deadLetters.length === 1);
    await member.stop();

    const shard = shardForKey('a', 2);
    expect(deadLetters[0]).toMatchObject({
      shardIndex: shard,
      id: written.id,
      destination: 'billing-dlq',
      cause: 'attempts-exhausted',
      attempts: 1,
    });
    // The name replaces the group in the per-shard key; the hash tag stays the shard's.
    const key = keys.shardDeadLetterStream(streamPrefix, shard, 'billing-dlq');
    expect(key).toBe(`rsc:shard:{${streamPrefix}:${shard}}:dead-letter:billing-dlq`);
    expect(await redis.client().xlen(key)).toBe(1);
    expect(await admin().readDeadLetters(streamPrefix, 'group')).toEqual([]);

    const [letter] = await admin().readDeadLetters(streamPrefix, 'billing-dlq');
    expect(letter).toMatchObject({
      entryId: written.id,
      key: 'a',
      consumerGroup: 'group',
      cause: 'attempts-exhausted',
      error: 'Error: poison',
      attempts: 1,
    });
    expect(letter.ref).toBe(`${shard}/${deadLetters[0].deadLetterId}`);
    expect(await admin().showDeadLetter(streamPrefix, 'billing-dlq', letter.ref)).toEqual(letter);

    // Replayed by the destination's name; the replay says which group gave up on it.
    const replay = await admin().replayDeadLetter(streamPrefix, 'billing-dlq', letter.ref);
    expect(replay.status).toBe('replayed');
    const [[, fields]] = await redis.client().xrange(keys.shardStream(streamPrefix, replay.to!.shardIndex), replay.to!.id, replay.to!.id);
    const headers = JSON.parse(fields[fields.indexOf('h') + 1] ?? '{}') as Record<string, string>;
    expect(headers[REPLAY_HEADER.group]).toBe('group');
    expect(headers[REPLAY_HEADER.of]).toBe(letter.ref);
    expect(await admin().readDeadLetters(streamPrefix, 'billing-dlq')).toEqual([]);
  });
});

describe('errors not worth retrying', () => {
  it('an error of a listed class or one the predicate names goes to the dead letters at its first failure; others are retried', async () => {
    const streamPrefix = uniqueName('dlq-nonretry');
    const calls = new Map<number, number>();
    const seen: { error: unknown; id: string }[] = [];
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 3,
      deadLetter: {
        nonRetryableErrors: [ValidationError],
        nonRetryable: (error, message) => {
          seen.push({ error, id: message.id });
          return (error as Error).message === 'gone for good';
        },
      },
      handler: (message: StreamMessage<KeyedPayload>) => {
        const seq = message.payload.seq;
        calls.set(seq, (calls.get(seq) ?? 0) + 1);
        if (seq === 1) throw new ValidationError('bad field');
        if (seq === 2) throw new Error('gone for good');
        if (seq === 3) throw new Error('flaky');
      },
    });
    const { deadLetters } = collect(member);
    await member.start();
    await send(
      streamPrefix,
      [1, 2, 3, 4].map((seq) => ({ key: 'k', payload: { seq } })),
    );
    await pollUntil('three entries dead-lettered', async () => deadLetters.length === 3);
    await pollUntil('the fourth handled', async () => calls.get(4) === 1);

    expect(Object.fromEntries(calls)).toEqual({ 1: 1, 2: 1, 3: 3, 4: 1 });
    expect(deadLetters.map((d) => [d.reason, d.cause, d.attempts])).toEqual([
      ['ValidationError: bad field', 'non-retryable', 1],
      ['Error: gone for good', 'non-retryable', 1],
      ['Error: flaky', 'attempts-exhausted', 3],
    ]);
    // A class match answers before the predicate is asked; the predicate sees the failed message.
    expect(seen.map((s) => (s.error as Error).message)).toEqual(['gone for good', 'flaky', 'flaky', 'flaky']);
    const letters = await admin().readDeadLetters(streamPrefix, 'group');
    expect(letters.map((l) => l.cause)).toEqual(['non-retryable', 'non-retryable', 'attempts-exhausted']);
  });

  it('a predicate that throws is reported and the entry is retried as usual, never lost', async () => {
    const streamPrefix = uniqueName('dlq-predicate-throws');
    let calls = 0;
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 2,
      deadLetter: {
        nonRetryable: () => {
          throw new Error('predicate broke');
        },
      },
      handler: () => {
        calls += 1;
        if (calls === 1) throw new Error('first try fails');
      },
    });
    const { deadLetters, errors } = collect(member);
    await member.start();
    await send(streamPrefix, [{ key: 'k', payload: { seq: 1 } }]);
    await pollUntil(
      'the retry succeeded and was acknowledged',
      async () => calls === 2 && (await admin().describeGroup(streamPrefix, 'group')).shards.every((s) => s.backlog === 0),
    );
    expect(deadLetters).toEqual([]);
    expect(errors.map((e) => e.message)).toContainEqual(
      expect.stringMatching(/deadLetter\.nonRetryable threw for .*predicate broke.*retried as usual/),
    );
  });
});

describe('maximum length', () => {
  it('each write trims the shard dead-letter stream with MAXLEN ~, dropping the oldest dead letters', async () => {
    const client = redis.client();
    // Small stream nodes, so that the approximate trim has whole nodes to drop in a short test.
    const [, nodeSize] = (await client.config('GET', 'stream-node-max-entries')) as string[];
    await client.config('SET', 'stream-node-max-entries', '5');
    try {
      const streamPrefix = uniqueName('dlq-maxlen');
      const member = aMember({
        streamPrefix,
        shardCount: 1,
        maxAttempts: 1,
        deadLetter: { maxLen: 10 },
        handler: () => {
          throw new Error('poison');
        },
      });
      const { deadLetters } = collect(member);
      await member.start();
      const written = await send(
        streamPrefix,
        Array.from({ length: 40 }, (_, i) => ({ key: 'k', payload: { seq: i } })),
      );
      await pollUntil('every entry dead-lettered', async () => deadLetters.length === 40);
      await member.stop();

      const letters = await admin().readDeadLetters(streamPrefix, 'group');
      // At least maxLen are kept, at most a node more; the ones kept are the newest, in order.
      expect(letters.length).toBeGreaterThanOrEqual(10);
      expect(letters.length).toBeLessThan(10 + 5);
      expect(letters.map((l) => l.entryId)).toEqual(written.slice(40 - letters.length).map((w) => w.id));
    } finally {
      await client.config('SET', 'stream-node-max-entries', nodeSize);
    }
  });
});

describe('onDeadLetter', () => {
  it('is called after the dead letter is written and the entry acknowledged, with the message and the error', async () => {
    const streamPrefix = uniqueName('dlq-hook');
    const notices: DeadLetterNotice[] = [];
    const observed: { stored: boolean; pending: number }[] = [];
    const failure = new ValidationError('bad field');
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 3,
      deadLetter: {
        nonRetryableErrors: [ValidationError],
        onDeadLetter: async (notice) => {
          // What the hook sees in Redis when it runs: the letter is there, the entry no longer pending.
          const stored = (await admin().showDeadLetter(streamPrefix, 'group', notice.ref)) !== null;
          const pending = Number(((await redis.client().xpending(keys.shardStream(streamPrefix, 0), 'group')) as unknown[])[0]);
          observed.push({ stored, pending });
          notices.push(notice);
        },
      },
      handler: () => {
        throw failure;
      },
    });
    await member.start();
    const [written] = await send(streamPrefix, [{ key: 'k', payload: { seq: 7 } }]);
    await pollUntil('the hook ran', async () => notices.length === 1);

    expect(observed).toEqual([{ stored: true, pending: 0 }]);
    const [notice] = notices;
    expect(notice).toMatchObject({
      shardIndex: 0,
      entryId: written.id,
      destination: 'group',
      cause: 'non-retryable',
      reason: 'ValidationError: bad field',
      attempts: 1,
    });
    expect(notice.ref).toBe(`0/${notice.deadLetterId}`);
    expect(notice.error).toBe(failure);
    expect(notice.message).toMatchObject({ id: written.id, key: 'k', payload: { seq: 7 } });
  });

  it('a hook that throws or rejects is reported and counted; the dead letters stay and the shard goes on', async () => {
    const streamPrefix = uniqueName('dlq-hook-fails');
    const handled: number[] = [];
    let hookCalls = 0;
    const member = aMember({
      streamPrefix,
      shardCount: 1,
      maxAttempts: 1,
      deadLetter: {
        onDeadLetter: () => {
          hookCalls += 1;
          if (hookCalls === 1) throw new Error('alert sink down');
          return Promise.reject(new Error('alert sink still down'));
        },
      },
      handler: (message: StreamMessage<KeyedPayload>) => {
        if (message.payload.seq < 3) throw new Error('poison');
        handled.push(message.payload.seq);
      },
    });
    const { errors } = collect(member);
    await member.start();
    await send(
      streamPrefix,
      [1, 2, 3].map((seq) => ({ key: 'k', payload: { seq } })),
    );
    await pollUntil('both hook failures counted', async () => member.stats().deadLetterHookFailures === 2);
    await pollUntil('the later entry handled', async () => handled.length === 1);

    expect((await admin().readDeadLetters(streamPrefix, 'group')).map((l) => l.error)).toEqual(['Error: poison', 'Error: poison']);
    const hookErrors = errors.map((e) => e.message).filter((m) => m.includes('onDeadLetter'));
    expect(hookErrors).toEqual([
      expect.stringMatching(
        /deadLetter\.onDeadLetter failed for .* \(dead letter 0\/\d+-\d+\): alert sink down; the dead letter stays written/,
      ),
      expect.stringMatching(/deadLetter\.onDeadLetter failed for .*: alert sink still down; the dead letter stays written/),
    ]);
    expect(member.stats().problems).toEqual([]);
  });
});
