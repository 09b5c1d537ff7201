import 'reflect-metadata';
import fs from 'node:fs';
import path from 'node:path';
import { Injectable, Module } from '@nestjs/common';
import { Test, type TestingModule } from '@nestjs/testing';
import { describe, expect, it } from 'vitest';
import {
  CoordinatorConsumerProperties,
  CoordinatorModule,
  StreamListener,
  StreamListenerRegistry,
  type StreamListenerOptions,
  type StreamMessage,
} from '@redis-stream-coordinator/nestjs';
import { CoordinatorTesting, InjectedFailureError, TestRedis } from '@redis-stream-coordinator/nestjs/testing';
import { closedAfterEach, quietLogger } from '../support/nest-apps';
import { findRoot } from '../support/repo-root';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// The testing kit users get (@redis-stream-coordinator/nestjs/testing): its waits, its error
// messages, its injected failures, and the package's export of it. The user's own view of it is
// test/examples/billing-app.test.ts (docs/testing.md).
const redis = useRedisServer();
const apps = closedAfterEach<TestingModule>();

/** An application with a listener (`notes`) and a bean consumer (`audit`) on a stream of its own. */
async function anApp(options: { init?: boolean; notes?: Partial<StreamListenerOptions> } = {}) {
  const stream = uniqueName('notes');
  @Injectable()
  class Notes {
    readonly seen: string[] = [];
    @StreamListener({ streamPrefix: stream, consumerGroup: 'notes', shardCount: 2, maxAttempts: 2, retryBackoffMs: 1, ...options.notes })
    onNote(message: StreamMessage<{ text: string }>) {
      this.seen.push(message.payload.text);
    }
  }
  @Module({
    imports: [CoordinatorModule.forRoot({ redis: { url: redis.server.url } })],
    providers: [
      Notes,
      {
        provide: 'audit',
        useFactory: () =>
          CoordinatorConsumerProperties.consumer({
            streamPrefix: stream,
            consumerGroup: 'audit',
            maxAttempts: 2,
            retryBackoffMs: 1,
            handler: () => undefined,
          }),
      },
    ],
  })
  class AppModule {}
  const app = await Test.createTestingModule({ imports: [AppModule] })
    .setLogger(quietLogger)
    .compile();
  apps.push(app);
  const kit = CoordinatorTesting.attach(app);
  if (options.init !== false) {
    await app.init();
    await kit.ready();
  }
  return { app, kit, stream, notes: () => app.get(Notes) };
}

describe('CoordinatorTesting', () => {
  it('waits for a listener and a bean consumer: each handled what was published, by id and by predicate', async () => {
    const { kit, stream, notes } = await anApp();
    const sent = await kit.publish(stream, { key: 'k', payload: { text: 'one' } });
    const handled = await kit.handled({ group: 'notes' }, sent);
    expect(handled).toMatchObject({ id: sent.id, shardIndex: sent.shardIndex, message: { key: 'k', payload: { text: 'one' } } });
    expect(handled.attempts).toMatchObject([{ outcome: 'succeeded', injected: false }]);
    await kit.handled({ group: 'audit', stream }, (message) => (message.payload as { text: string }).text === 'one');
    expect(notes().seen).toEqual(['one']);
    await kit.drained();
    kit.detach();
  });

  it('fails the next N attempts of one group only, then dead-letters with failWhen until removed', async () => {
    const { kit, stream, notes } = await anApp();
    const rule = kit.failNext({ group: 'notes' }, 1);
    const first = await kit.publish(stream, { key: 'a', payload: { text: 'retried' } });
    const retried = await kit.handled({ group: 'notes' }, first);
    expect(retried.attempts.map((a) => [a.outcome, a.injected])).toEqual([
      ['failed', true],
      ['succeeded', false],
    ]);
    expect(retried.attempts[0].error).toMatch(/^InjectedFailureError: injected failure 1 of 1 \(CoordinatorTesting.failNext\)/);
    expect(rule).toMatchObject({ failed: 1, remaining: 0 });
    expect((await kit.handled({ group: 'audit' }, first)).attempts).toHaveLength(1);

    const poison = kit.failWhen({ group: 'audit' }, (message) => message.key === 'bad', new TypeError('refused by the test'));
    const bad = await kit.publish(stream, { key: 'bad', payload: { text: 'bad' } });
    const letter = await kit.deadLettered({ group: 'audit' }, bad);
    expect(letter.deadLetter).toMatchObject({ cause: 'attempts-exhausted', reason: expect.stringContaining('refused by the test') });
    expect(letter.attempts.map((a) => a.error)).toEqual(['TypeError: refused by the test', 'TypeError: refused by the test']);
    await kit.handled({ group: 'notes' }, bad);
    poison.remove();
    const again = await kit.publish(stream, { key: 'bad', payload: { text: 'fine now' } });
    await kit.handled({ group: 'audit' }, again);
    expect(notes().seen).toEqual(['retried', 'bad', 'fine now']);
    kit.detach();
  });

  it('rejects at once when the entry had the other outcome, and after the deadline with what the group was seen doing', async () => {
    const { kit, stream } = await anApp();
    kit.failNext({ group: 'notes' }, 2);
    const sent = await kit.publish(stream, { key: 'k', payload: { text: 'doomed' } });
    await expect(kit.handled({ group: 'notes' }, sent)).rejects.toThrow(
      new RegExp(
        `CoordinatorTesting.handled: group "notes" of stream "${stream}" dead-lettered entry ${sent.id} of shard ${sent.shardIndex} instead: ` +
          `${sent.id} \\(shard ${sent.shardIndex}, key "k", \\{"text":"doomed"\\}\\): attempt 1 failed \\(InjectedFailureError: .*\\) \\[injected\\], ` +
          `attempt 2 failed .*; dead-lettered \\(attempts-exhausted: `,
      ),
    );
    const started = Date.now();
    const error = await kit.handled({ group: 'notes' }, { id: '1-1' }, { timeoutMs: 300 }).catch((e: Error) => e);
    expect(Date.now() - started).toBeGreaterThanOrEqual(300);
    expect((error as Error).message).toBe(
      `CoordinatorTesting.handled: group "notes" of stream "${stream}" did not handle entry 1-1 within 300 ms; ` +
        `it saw 1 entries: 0 handled, 1 dead-lettered, 0 not acknowledged yet; last:\n  - ${sent.id} (shard ${sent.shardIndex}, key "k", {"text":"doomed"}): ` +
        `attempt 1 failed (InjectedFailureError: injected failure 1 of 2 (CoordinatorTesting.failNext) of entry ${sent.id}) [injected], ` +
        `attempt 2 failed (InjectedFailureError: injected failure 2 of 2 (CoordinatorTesting.failNext) of entry ${sent.id}) [injected]; ` +
        `dead-lettered (attempts-exhausted: InjectedFailureError: injected failure 2 of 2 (CoordinatorTesting.failNext) of entry ${sent.id})`,
    );
    kit.detach();
  });

  it('drained() waits out a paused listener and says what is left', async () => {
    const { app, kit, stream } = await anApp();
    app
      .get(StreamListenerRegistry)
      .getAll()
      .forEach((container) => {
        container.pause();
      });
    const sent = await kit.publish(stream, { key: 'k', payload: { text: 'waiting' } });
    await expect(kit.drained({ timeoutMs: 300 })).rejects.toThrow(
      new RegExp(
        `CoordinatorTesting.drained: not drained within 300 ms; last seen: group "notes" of stream "${stream}": shard ${sent.shardIndex} lag 1 pending 0`,
      ),
    );
    app
      .get(StreamListenerRegistry)
      .getAll()
      .forEach((container) => {
        container.resume();
      });
    await kit.drained();
    kit.detach();
  });

  it('drained() waits for what waits in the schedules (a deferred retry, a delayed entry), and releaseScheduled() makes it due now, without sleeping', async () => {
    const { kit, stream, notes } = await anApp({ notes: { retryMode: 'deferred', retryBackoffMs: 60_000, retryBackoffMaxMs: 60_000 } });
    kit.failNext({ group: 'notes' }, 1);
    const retried = await kit.publish(stream, { key: 'r', payload: { text: 'retried' } });
    const delayed = await kit.publish(stream, { key: 'd', payload: { text: 'delayed' }, delayMs: 60_000 });
    await kit.handled({ group: 'audit' }, retried);
    const waiting = ((await kit.drained({ timeoutMs: 500 }).catch((error: Error) => error)) as Error).message;
    expect(waiting).toMatch(
      new RegExp(`^CoordinatorTesting.drained: not drained within 500 ms; last seen: group "notes" of stream "${stream}": shard`),
    );
    expect(waiting).toMatch(new RegExp(`shard ${retried.shardIndex} (scheduled 1 )?deferred 1`));
    expect(waiting).toMatch(new RegExp(`shard ${delayed.shardIndex} scheduled 1`));
    expect(waiting).toContain(`(in the schedules: kit.releaseScheduled("${stream}") makes them due now)`);
    expect(await kit.releaseScheduled(stream)).toBe(2);
    const handled = await kit.handled({ group: 'notes' }, retried);
    expect(handled.attempts.map((a) => a.outcome)).toEqual(['failed', 'succeeded']);
    await kit.handled({ group: 'notes' }, (message) => (message.payload as { text: string }).text === 'delayed');
    expect(delayed.dueAt).toBeGreaterThan(Date.now() + 50_000);
    await kit.drained();
    expect(notes().seen.sort()).toEqual(['delayed', 'retried']);
    expect(await kit.releaseScheduled(stream)).toBe(0);
    kit.detach();
  });

  it("follows an entry parked behind its key's deferred retry (deferredOrder 'key'): acknowledged by the park yet not handled, then handled as its copy, after the retry", async () => {
    const { kit, stream, notes } = await anApp({ notes: { retryMode: 'deferred', retryBackoffMs: 60_000, retryBackoffMaxMs: 60_000 } });
    kit.failNext({ group: 'notes' }, 1);
    const retried = await kit.publish(stream, { key: 'r', payload: { text: 'retried' } });
    await kit.handled({ group: 'audit' }, retried);
    const after = await kit.publish(stream, { key: 'r', payload: { text: 'after' } });
    await kit.handled({ group: 'audit' }, after);
    const early = (await kit.handled({ group: 'notes' }, after, { timeoutMs: 700 }).catch((error: Error) => error)) as Error;
    expect(early.message).toContain(
      `${after.id} (shard ${after.shardIndex}, not given to a handler): no attempt; parked behind its key's deferred retry`,
    );
    expect(await kit.releaseScheduled(stream)).toBe(2);
    const handled = await kit.handled({ group: 'notes' }, after);
    expect(handled.attempts.map((a) => a.outcome)).toEqual(['succeeded']);
    expect(handled.retriedAs).toHaveLength(1);
    expect((await kit.handled({ group: 'notes' }, retried)).attempts.map((a) => a.outcome)).toEqual(['failed', 'succeeded']);
    await kit.drained();
    expect(notes().seen).toEqual(['retried', 'after']);
    kit.detach();
  });

  it('names what is wrong: an unknown group, bad arguments, an application not started, a second kit', async () => {
    const { app, kit } = await anApp({ init: false });
    await expect(kit.ready({ timeoutMs: 1000 })).rejects.toThrow(
      'CoordinatorTesting.ready: the application has no running listener or consumer (was app.init() called?)',
    );
    await app.init();
    await kit.ready();
    expect(() => kit.failNext({ group: 'bills' }, 1)).toThrow(
      /^CoordinatorTesting.failNext: the application has no listener of group "bills"; its groups: notes \(notes-.*\), audit \(notes-.*\)$/,
    );
    expect(() => kit.failNext({ group: 'notes' }, 0)).toThrow(
      'CoordinatorTesting.failNext: count must be an integer from 1 to 9007199254740991, got 0',
    );
    expect(() => kit.handled({ group: 'notes' }, { id: '1-1' }, { timeoutMs: 0 })).toThrow(
      'CoordinatorTesting.handled: timeoutMs must be an integer from 1 to 86400000, got 0',
    );
    expect(() => CoordinatorTesting.attach(app)).toThrow(/a handler hook is already set \(one testing kit per application/);
    kit.detach();
    const next = CoordinatorTesting.attach(app);
    expect(() => kit.entries({ group: 'notes' })).toThrow('CoordinatorTesting: this kit was detached; attach a new one');
    next.detach();
  });

  it('TestRedis: a private redis-server, or REDIS_URL untouched; a REDIS_URL that is not a URL is refused', async () => {
    const own = await TestRedis.start({});
    expect(own.isPrivate).toBe(true);
    expect(own.server!.isRunning()).toBe(true);
    await own.stop();
    expect(own.server!.isRunning()).toBe(false);
    const shared = await TestRedis.start({ REDIS_URL: redis.server.url });
    expect(shared).toMatchObject({ url: redis.server.url, isPrivate: false });
    await shared.stop();
    expect(redis.server.isRunning()).toBe(true);
    await expect(TestRedis.start({ REDIS_URL: '127.0.0.1:6390' })).rejects.toThrow(
      'TestRedis: REDIS_URL must be a redis:// or rediss:// URL, got "127.0.0.1:6390"',
    );
  });

  it('is the package export /testing of the built package, which imports no test runner', () => {
    const root = findRoot(__dirname);
    const testing = require.resolve('@redis-stream-coordinator/nestjs/testing', { paths: [root] });
    expect(path.relative(root, testing)).toBe(path.join('packages', 'nestjs', 'dist', 'testing', 'index.js'));
    const exported = require(testing) as Record<string, unknown>;
    expect(Object.keys(exported).sort()).toEqual([
      'CoordinatorTesting',
      'DEFAULT_TIMEOUT_MS',
      'InjectedFailureError',
      'REDIS_URL_VARIABLE',
      'TestRedis',
    ]);
    expect(InjectedFailureError.name).toBe('InjectedFailureError');
    for (const file of fs.readdirSync(path.dirname(testing)).filter((f) => f.endsWith('.js'))) {
      expect(fs.readFileSync(path.join(path.dirname(testing), file), 'utf8'), file).not.toMatch(/vitest|jest|mocha/);
    }
  });
});
