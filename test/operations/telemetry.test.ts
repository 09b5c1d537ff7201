import { type Context, context, metrics, propagation, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  AggregationTemporality,
  type DataPoint,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  BatchError,
  CoordinatedMember,
  CoordinatorAdmin,
  KeyBuilder,
  type ReleasedEvent,
  type StreamMessage,
  StreamProducer,
} from '@redis-stream-coordinator/core';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

const redis = useRedisServer();
const spans = new InMemorySpanExporter();
const metricExporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
const reader = new PeriodicExportingMetricReader({ exporter: metricExporter, exportIntervalMillis: 3_600_000 });
const started: CoordinatedMember[] = [];

beforeAll(() => {
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }));
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
});

afterAll(async () => {
  await reader.shutdown();
  metrics.disable();
  trace.disable();
  propagation.disable();
  context.disable();
});

afterEach(async () => {
  await Promise.all(started.splice(0).map((m) => m.stop().catch(() => undefined)));
  spans.reset();
});

function aMember(streamPrefix: string, memberId: string, options: Partial<ConstructorParameters<typeof CoordinatedMember>[1]> = {}) {
  const member = new CoordinatedMember(redis.client(), {
    streamPrefix,
    consumerGroup: 'group',
    memberId,
    shardCount: 2,
    coordinator: { heartbeatIntervalMs: 200 },
    handler: () => undefined,
    ...options,
  });
  member.on('error', () => undefined); // tests listen for what they check
  started.push(member);
  return member;
}

/** One metric collection (a forced export): data points of `name` for the stream `streamPrefix`. */
async function points(name: string, streamPrefix: string): Promise<DataPoint<unknown>[]> {
  metricExporter.reset();
  await reader.forceFlush();
  const exported = metricExporter.getMetrics().at(-1);
  const metric = exported?.scopeMetrics.flatMap((scope) => scope.metrics).find((m) => m.descriptor.name === name);
  return ((metric?.dataPoints ?? []) as DataPoint<unknown>[]).filter((p) => p.attributes['messaging.destination.name'] === streamPrefix);
}

async function sum(name: string, streamPrefix: string, attributes: Record<string, unknown> = {}): Promise<number> {
  const matching = (await points(name, streamPrefix)).filter((p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v));
  return matching.reduce((total, p) => total + (typeof p.value === 'number' ? p.value : (p.value as { count: number }).count), 0);
}

function spansOf(streamPrefix: string, name: 'publish' | 'process'): ReadableSpan[] {
  return spans.getFinishedSpans().filter((s) => s.name === `${name} ${streamPrefix}`);
}

describe('traces', () => {
  it("a handler call's process span is the child of the producer's publish span, with the messaging attributes", async () => {
    const streamPrefix = uniqueName('otel-trace');
    const seen: { headers: Record<string, string>; activeSpanId?: string }[] = [];
    const member = aMember(streamPrefix, 'a', {
      handler: (message) => {
        seen.push({ headers: message.headers, activeSpanId: trace.getActiveSpan()?.spanContext().spanId });
      },
    });
    await member.start();
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const headers = { tenant: 't1' };
    const sent = await producer.send({ key: 'user-42', payload: { n: 1 }, headers });
    expect(headers).toEqual({ tenant: 't1' }); // the caller's object is not changed
    await pollUntil('the entry handled', async () => spansOf(streamPrefix, 'process').length === 1);

    const [publish] = spansOf(streamPrefix, 'publish');
    const [processSpan] = spansOf(streamPrefix, 'process');
    expect(publish.kind).toBe(SpanKind.PRODUCER);
    expect(publish.attributes).toMatchObject({
      'messaging.system': 'redis_streams',
      'messaging.operation.type': 'send',
      'messaging.destination.name': streamPrefix,
      'messaging.message.id': sent.id,
      'messaging.destination.partition.id': String(sent.shardIndex),
    });
    expect(seen[0].headers).toEqual({
      tenant: 't1',
      traceparent: `00-${publish.spanContext().traceId}-${publish.spanContext().spanId}-01`,
    });
    expect(processSpan.kind).toBe(SpanKind.CONSUMER);
    expect(processSpan.spanContext().traceId).toBe(publish.spanContext().traceId);
    expect(processSpan.parentSpanContext?.spanId).toBe(publish.spanContext().spanId);
    expect(processSpan.attributes).toEqual({
      'messaging.system': 'redis_streams',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': streamPrefix,
      'messaging.consumer.group.name': 'group',
      'messaging.client.id': 'a',
      'messaging.destination.partition.id': String(sent.shardIndex),
      'messaging.message.id': sent.id,
      'messaging.redis_streams.message.delivery_count': 1,
      'messaging.redis_streams.message.key': 'user-42',
    });
    // The handler runs inside its span: what it traces is the process span's child.
    expect(seen[0].activeSpanId).toBe(processSpan.spanContext().spanId);
    expect(processSpan.status.code).toBe(SpanStatusCode.UNSET);
  });

  it('concurrent sends merged into one script call keep a publish span each, under their own parent, with their own id in their own traceparent', async () => {
    const streamPrefix = uniqueName('otel-merged');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 1 });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ key: 'warm-up', payload: 0 });
    spans.reset();
    const tracer = trace.getTracer('test');
    const sent = await Promise.all(
      ['a', 'b', 'c'].map((key) =>
        tracer.startActiveSpan(`caller ${key}`, (caller) => producer.send({ key, payload: key }).finally(() => caller.end())),
      ),
    );
    const publishes = spansOf(streamPrefix, 'publish');
    expect(publishes).toHaveLength(3);
    const callers = spans.getFinishedSpans().filter((s) => s.name.startsWith('caller '));
    const entries = await redis.client().xrange(new KeyBuilder().shardStream(streamPrefix, 0), '-', '+');
    sent.forEach((result, i) => {
      const publish = publishes.find((p) => p.attributes['messaging.message.id'] === result.id)!;
      expect(publish.parentSpanContext?.spanId).toBe(callers.find((c) => c.name === `caller ${'abc'[i]}`)!.spanContext().spanId);
      const [, fields] = entries.find(([id]) => id === result.id)!;
      expect(JSON.parse(fields[fields.indexOf('h') + 1]).traceparent).toBe(
        `00-${publish.spanContext().traceId}-${publish.spanContext().spanId}-01`,
      );
    });
  });

  it('each failed call records its error on its own span; retries and the dead letter are counted', async () => {
    const streamPrefix = uniqueName('otel-fail');
    const member = aMember(streamPrefix, 'a', {
      maxAttempts: 2,
      retryBackoffMs: 10,
      handler: () => {
        throw new RangeError('bad amount');
      },
    });
    const deadLetters: unknown[] = [];
    member.on('dead-letter', (event) => deadLetters.push(event));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: 1 });
    await pollUntil('the entry dead-lettered', async () => deadLetters.length === 1);

    const calls = spansOf(streamPrefix, 'process');
    expect(calls.map((s) => s.attributes['messaging.redis_streams.message.delivery_count'])).toEqual([1, 2]);
    for (const call of calls) {
      expect(call.status).toEqual({ code: SpanStatusCode.ERROR, message: 'bad amount' });
      expect(call.attributes['error.type']).toBe('RangeError');
      expect(call.events.map((e) => e.name)).toEqual(['exception']);
    }
    expect(await sum('rsc.consumer.retried', streamPrefix)).toBe(1);
    expect(
      await sum('rsc.consumer.dead_lettered', streamPrefix, { 'messaging.redis_streams.dead_letter.cause': 'attempts_exhausted' }),
    ).toBe(1);
    expect(await sum('messaging.process.duration', streamPrefix, { 'error.type': 'RangeError' })).toBe(2);
    expect(await sum('messaging.client.consumed.messages', streamPrefix)).toBe(1);
    // The dead letter's write acknowledges the entry.
    expect(await sum('rsc.consumer.acknowledged', streamPrefix)).toBe(1);
  });

  it("a propagator that throws on an entry's headers fails no entry and blocks no worker: every entry is handled, one error event says so", async () => {
    const streamPrefix = uniqueName('otel-badprop');
    // The application's propagator chokes on some header any producer may write.
    const w3c = new W3CTraceContextPropagator();
    propagation.disable(); // a global is registered once: the suite's W3C one goes first
    propagation.setGlobalPropagator({
      inject: (ctx, carrier, setter) => w3c.inject(ctx, carrier, setter),
      extract: (ctx, carrier, getter) => {
        if ((carrier as Record<string, unknown>)?.poison !== undefined) throw new TypeError('cannot parse poison');
        return w3c.extract(ctx, carrier, getter);
      },
      fields: () => w3c.fields(),
    });
    try {
      const handled: string[] = [];
      // One worker: a slot lost to the failure would stop everything after it.
      const member = aMember(streamPrefix, 'a', { runtimeMaxConcurrency: 1, handler: (m: StreamMessage) => void handled.push(m.id) });
      const errors: Error[] = [];
      member.on('error', (error) => errors.push(error));
      await member.start();
      const producer = new StreamProducer(redis.client(), { streamPrefix });
      for (let i = 0; i < 6; i++) await producer.send({ key: 'k', payload: i, headers: i % 2 === 0 ? { poison: 'x' } : {} });
      await pollUntil('all 6 entries handled', async () => handled.length === 6);
      const said = errors.filter((e) => /telemetry: recording a handler call failed/.test(e.message));
      expect(said).toHaveLength(1);
      expect(said[0].message).toMatch(/cannot parse poison/);
      // The calls whose probe worked are recorded as usual.
      expect(spansOf(streamPrefix, 'process')).toHaveLength(3);

      // A member without an 'error' listener: EventEmitter throws the report, which must not take
      // the worker either.
      const unheard = uniqueName('otel-badprop-unheard');
      const quiet: string[] = [];
      const bare = new CoordinatedMember(redis.client(), {
        streamPrefix: unheard,
        consumerGroup: 'group',
        memberId: 'b',
        shardCount: 1,
        runtimeMaxConcurrency: 1,
        coordinator: { heartbeatIntervalMs: 200 },
        handler: (m) => void quiet.push(m.id),
      });
      started.push(bare);
      await bare.start();
      const other = new StreamProducer(redis.client(), { streamPrefix: unheard });
      for (let i = 0; i < 3; i++) await other.send({ key: 'k', payload: i, headers: { poison: 'x' } });
      await pollUntil('all 3 entries handled by the member without a listener', async () => quiet.length === 3);
    } finally {
      propagation.disable();
      propagation.setGlobalPropagator(new W3CTraceContextPropagator());
    }
  });

  it.each(['before', 'after'] as const)(
    "a context manager that throws %s the handler's call neither fails the entry nor runs it twice",
    async (when) => {
      const streamPrefix = uniqueName(`otel-badctx-${when}`);
      const inner = new AsyncLocalStorageContextManager().enable();
      const ours = (ctx: Context) => (trace.getSpan(ctx) as unknown as { name?: string } | undefined)?.name === `process ${streamPrefix}`;
      context.disable(); // a global is registered once: the suite's goes first
      context.setGlobalContextManager({
        active: () => inner.active(),
        with: (ctx, fn, thisArg, ...args) => {
          if (!ours(ctx)) return inner.with(ctx, fn, thisArg, ...args);
          if (when === 'before') throw new Error('context manager broke before the call');
          inner.with(ctx, fn, thisArg, ...args);
          throw new Error('context manager broke after the call');
        },
        bind: (ctx, target) => inner.bind(ctx, target),
        enable() {
          return this;
        },
        disable() {
          inner.disable();
          return this;
        },
      });
      try {
        const runs = new Map<string, number>();
        const member = aMember(streamPrefix, 'a', { handler: async (m: StreamMessage) => void runs.set(m.id, (runs.get(m.id) ?? 0) + 1) });
        const errors: Error[] = [];
        member.on('error', (error) => errors.push(error));
        await member.start();
        const producer = new StreamProducer(redis.client(), { streamPrefix });
        for (let i = 0; i < 4; i++) await producer.send({ key: 'k', payload: i });
        await pollUntil('4 entries acknowledged', async () => (await sum('rsc.consumer.acknowledged', streamPrefix)) === 4);
        expect([...runs.values()]).toEqual([1, 1, 1, 1]);
        expect(errors.filter((e) => /telemetry: recording a handler call failed.*context manager broke/.test(e.message))).toHaveLength(1);
      } finally {
        context.disable();
        context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
      }
    },
  );

  it('counts an entry dead-lettered at its first failure as non_retryable, and does not count a retry', async () => {
    const streamPrefix = uniqueName('otel-nonretry');
    const member = aMember(streamPrefix, 'a', {
      maxAttempts: 5,
      retryBackoffMs: 10,
      deadLetter: { nonRetryableErrors: [RangeError] },
      handler: () => {
        throw new RangeError('bad amount');
      },
    });
    const deadLetters: unknown[] = [];
    member.on('dead-letter', (event) => deadLetters.push(event));
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix }).send({ key: 'k', payload: 1 });
    await pollUntil('the entry dead-lettered', async () => deadLetters.length === 1);

    expect(await sum('rsc.consumer.dead_lettered', streamPrefix, { 'messaging.redis_streams.dead_letter.cause': 'non_retryable' })).toBe(1);
    expect(
      await sum('rsc.consumer.dead_lettered', streamPrefix, { 'messaging.redis_streams.dead_letter.cause': 'attempts_exhausted' }),
    ).toBe(0);
    expect(await sum('rsc.consumer.retried', streamPrefix)).toBe(0);
  });
});

describe('batch handlers', () => {
  it('each batch call is one process span (shard, size, first and last id, the BatchError index) linked to its producers, and one duration and size point', async () => {
    const streamPrefix = uniqueName('otel-batch');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 2 });
    const sent = await new StreamProducer(redis.client(), { streamPrefix }).sendBatch(
      [1, 2, 3, 4, 5].map((n) => ({ shardIndex: 0, payload: n })),
    );
    const calls: { payloads: number[]; activeSpanId?: string }[] = [];
    const member = aMember(streamPrefix, 'a', {
      batch: { maxSize: 5 } as never,
      retryBackoffMs: 10,
      handler: ((messages: StreamMessage<number>[]) => {
        calls.push({ payloads: messages.map((m) => m.payload), activeSpanId: trace.getActiveSpan()?.spanContext().spanId });
        // The first call fails at its third entry: the first two are done, the rest are tried again.
        if (calls.length === 1) throw new BatchError(2, new RangeError('row 3 refused'));
      }) as never,
    });
    await member.start();
    await pollUntil(
      'two batch calls made and all acknowledged',
      async () => calls.length === 2 && (await sum('rsc.consumer.acknowledged', streamPrefix)) === 5,
    );
    expect(calls.map((c) => c.payloads)).toEqual([
      [1, 2, 3, 4, 5],
      [3, 4, 5],
    ]);

    const [publish] = spansOf(streamPrefix, 'publish');
    const [failed, retried] = spansOf(streamPrefix, 'process');
    expect(spansOf(streamPrefix, 'process')).toHaveLength(2);
    expect(failed.kind).toBe(SpanKind.CONSUMER);
    expect(failed.attributes).toEqual({
      'messaging.system': 'redis_streams',
      'messaging.operation.type': 'process',
      'messaging.operation.name': 'process',
      'messaging.destination.name': streamPrefix,
      'messaging.consumer.group.name': 'group',
      'messaging.client.id': 'a',
      'messaging.destination.partition.id': '0',
      'messaging.batch.message_count': 5,
      'messaging.redis_streams.batch.first_message_id': sent[0].id,
      'messaging.redis_streams.batch.last_message_id': sent[4].id,
      'messaging.redis_streams.message.delivery_count': 1,
      'messaging.redis_streams.batch.failed_index': 2,
      'error.type': 'RangeError',
    });
    expect(failed.status).toEqual({ code: SpanStatusCode.ERROR, message: 'row 3 refused' });
    expect(failed.events.map((e) => e.name)).toEqual(['exception']);
    // A batch has many parents: a link to each entry's producer context, none as its parent.
    expect(failed.parentSpanContext).toBeUndefined();
    expect(failed.links.map((l) => l.context.spanId)).toEqual(Array(5).fill(publish.spanContext().spanId));
    expect(retried.attributes).toMatchObject({
      'messaging.batch.message_count': 3,
      'messaging.redis_streams.batch.first_message_id': sent[2].id,
      'messaging.redis_streams.batch.last_message_id': sent[4].id,
      'messaging.redis_streams.message.delivery_count': 2,
    });
    expect(retried.attributes['messaging.redis_streams.batch.failed_index']).toBeUndefined();
    expect(retried.status.code).toBe(SpanStatusCode.UNSET);
    // The handler runs inside its call's span.
    expect(calls.map((c) => c.activeSpanId)).toEqual([failed.spanContext().spanId, retried.spanContext().spanId]);

    expect(await sum('messaging.process.duration', streamPrefix)).toBe(2);
    expect(await sum('messaging.process.duration', streamPrefix, { 'error.type': 'RangeError' })).toBe(1);
    const [size] = await points('rsc.consumer.batch.size', streamPrefix);
    expect(size.value).toMatchObject({ count: 2, sum: 8, min: 3, max: 5 });
    expect(await sum('messaging.client.consumed.messages', streamPrefix)).toBe(5);
    expect(await sum('rsc.consumer.retried', streamPrefix)).toBe(1);
  });
});

describe('metrics', () => {
  it('counts consumed and acknowledged entries, and reports owned shards, epoch, lag and pending per shard, heartbeats and rebalances', async () => {
    const streamPrefix = uniqueName('otel-metrics');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 2 });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.sendBatch([1, 2, 3, 4, 5].map((n) => ({ shardIndex: 0, payload: n })));
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const handled: number[] = [];
    const member = aMember(streamPrefix, 'a', {
      handler: async (message) => {
        await gate;
        handled.push(message.payload as number);
      },
    });
    member.pause(); // claims its shards, reads nothing: all five entries are lag
    await member.start();
    await pollUntil('both shards owned', async () => member.ownedShards().length === 2);

    const byShard = async (name: string) =>
      Object.fromEntries((await points(name, streamPrefix)).map((p) => [p.attributes['messaging.destination.partition.id'], p.value]));
    await pollUntil('lag 5 on shard 0', async () => (await byShard('rsc.consumer.lag'))['0'] === 5);
    expect(await byShard('rsc.consumer.lag')).toEqual({ 0: 5, 1: 0 });
    expect(await byShard('rsc.consumer.pending')).toEqual({ 0: 0, 1: 0 });
    const [owned] = await points('rsc.consumer.owned_shards', streamPrefix);
    expect(owned).toMatchObject({ value: 2, attributes: { 'messaging.client.id': 'a', 'messaging.consumer.group.name': 'group' } });
    const [epoch] = await points('rsc.consumer.member_epoch', streamPrefix);
    expect(epoch.value).toBe(member.currentMemberEpoch());

    member.resume(); // read, first handler blocked: what was read is pending, not lag
    await pollUntil('entries read and pending', async () => (await byShard('rsc.consumer.pending'))['0'] === 5);
    expect((await byShard('rsc.consumer.lag'))['0']).toBe(0);
    release();
    await pollUntil('all acknowledged', async () => (await sum('rsc.consumer.acknowledged', streamPrefix)) === 5);
    expect(await sum('messaging.client.consumed.messages', streamPrefix)).toBe(5);
    expect(await sum('messaging.process.duration', streamPrefix)).toBe(5);
    await pollUntil('nothing pending', async () => (await byShard('rsc.consumer.pending'))['0'] === 0);

    // Joining a group is a rebalance (ASSIGNING, then STABLE), measured from this member's heartbeats.
    expect(await sum('rsc.consumer.rebalances', streamPrefix, { 'messaging.client.id': 'a' })).toBeGreaterThanOrEqual(1);
    expect(await sum('rsc.consumer.rebalance.duration', streamPrefix, { 'messaging.client.id': 'a' })).toBeGreaterThanOrEqual(1);
    expect(await sum('rsc.coordinator.heartbeat.duration', streamPrefix, { 'messaging.client.id': 'a' })).toBeGreaterThanOrEqual(2);
    // The producer's side.
    expect(await sum('messaging.client.sent.messages', streamPrefix)).toBe(5);

    // A stopped member's series end at 0 (cumulative exporters keep a series' last value).
    await member.stop();
    expect((await points('rsc.consumer.owned_shards', streamPrefix)).map((p) => p.value)).toEqual([0]);
    expect(await byShard('rsc.consumer.pending')).toEqual({ 0: 0, 1: 0 });
  });

  it('reports scheduled, deferred and due lag per owned shard; a member that releases due entries says so (released event)', async () => {
    const streamPrefix = uniqueName('otel-schedules');
    await new CoordinatorAdmin(redis.client()).createStream({ streamPrefix, shardCount: 2 });
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    const member = aMember(streamPrefix, 'a', {
      blockMs: 200,
      retryMode: 'deferred',
      retryBackoffMs: 3_600_000,
      retryBackoffMaxMs: 3_600_000,
      handler: (message) => {
        if (message.key === 'bad') throw new Error('bad');
      },
    });
    const released: ReleasedEvent[] = [];
    member.on('released', (event) => released.push(event));
    await member.start();
    await pollUntil('both shards owned', async () => member.ownedShards().length === 2);
    await producer.send({ shardIndex: 0, key: 'bad', payload: 1 });
    await producer.send({ shardIndex: 1, payload: 2, delayMs: 3_600_000 });
    const byShard = async (name: string) =>
      Object.fromEntries((await points(name, streamPrefix)).map((p) => [p.attributes['messaging.destination.partition.id'], p.value]));
    await pollUntil('the deferral counted', async () => (await byShard('rsc.consumer.deferred'))['0'] === 1);
    expect(await byShard('rsc.consumer.deferred')).toEqual({ 0: 1, 1: 0 });
    expect(await byShard('rsc.consumer.scheduled')).toEqual({ 0: 0, 1: 1 });
    expect(await byShard('rsc.consumer.due_lag')).toEqual({ 0: 0, 1: 0 });

    member.pause(); // releases nothing: a due entry waits, and its lateness shows
    await producer.send({ shardIndex: 1, payload: 3, delayMs: 1 });
    await pollUntil('the due entry late by more than 300 ms', async () => ((await byShard('rsc.consumer.due_lag'))['1'] as number) > 0.3);
    expect(await byShard('rsc.consumer.scheduled')).toEqual({ 0: 0, 1: 2 });
    expect(released).toEqual([]);
    member.resume();
    await pollUntil('released', async () => released.length === 1);
    expect(released).toEqual([{ shardIndex: 1, count: 1 }]);
    await pollUntil('no due lag', async () => (await byShard('rsc.consumer.due_lag'))['1'] === 0);
    expect(await byShard('rsc.consumer.scheduled')).toEqual({ 0: 0, 1: 1 });
  });

  it("counts an acknowledgement batch refused by the fencing token of the shard's next owner", async () => {
    const streamPrefix = uniqueName('otel-fenced-ack');
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const runsOf = { a: 0, b: 0 };
    const handler = (name: 'a' | 'b') => async () => {
      runsOf[name] += 1;
      await gate;
    };
    // a's handler outlives the revocation timeout: the shard goes to b while it still runs.
    const a = aMember(streamPrefix, 'a', { revocationTimeoutMs: 100, runtimeMaxConcurrency: 2, handler: handler('a') });
    const acks: boolean[] = [];
    a.on('acknowledged', (event) => acks.push(event.accepted));
    await a.start();
    await pollUntil('a owns both shards', async () => a.ownedShards().length === 2);
    const producer = new StreamProducer(redis.client(), { streamPrefix });
    await producer.send({ shardIndex: 0, payload: 0 });
    await producer.send({ shardIndex: 1, payload: 1 });
    await pollUntil('a runs both entries', async () => runsOf.a === 2);

    const b = aMember(streamPrefix, 'b', { handler: handler('b') });
    await b.start();
    // b runs the moved shard's entry again: it holds the shard's fencing token now.
    await pollUntil('b runs the moved entry', async () => runsOf.b === 1);
    release();
    await pollUntil("a's acknowledgements settled", async () => acks.length === 2);
    expect(acks.sort()).toEqual([false, true]);
    expect(await sum('rsc.consumer.ack_batches.refused', streamPrefix)).toBe(1);
  });

  it('a lag read that fails is one error event and a gap in the lag and pending series, not a failed collection', async () => {
    const streamPrefix = uniqueName('otel-noxinfo');
    const admin = redis.client();
    await admin.call('ACL', 'SETUSER', 'noxinfo', 'on', '>pw', '~*', '&*', '+@all', '-xinfo');
    const member = new CoordinatedMember(redis.client({ username: 'noxinfo', password: 'pw' }), {
      streamPrefix,
      consumerGroup: 'group',
      memberId: 'a',
      shardCount: 2,
      coordinator: { heartbeatIntervalMs: 200 },
      handler: () => undefined,
    });
    started.push(member);
    const errors: Error[] = [];
    member.on('error', (error) => errors.push(error));
    await member.start();
    await pollUntil('both shards owned', async () => member.ownedShards().length === 2);

    expect(await points('rsc.consumer.lag', streamPrefix)).toEqual([]);
    expect(await points('rsc.consumer.pending', streamPrefix)).toEqual([]);
    expect((await points('rsc.consumer.owned_shards', streamPrefix)).map((p) => p.value)).toEqual([2]);
    const lagErrors = errors.filter((e) => /reading lag and pending for metrics failed/.test(e.message));
    expect(lagErrors).toHaveLength(1);
    expect(lagErrors[0].message).toMatch(/NOPERM|no permissions/i);

    // Allowed again: the gauges are back at the next collection.
    await admin.call('ACL', 'SETUSER', 'noxinfo', '+xinfo');
    expect(await points('rsc.consumer.lag', streamPrefix)).toHaveLength(2);
  });
});

describe('off switches', () => {
  it('telemetry: false produces no span, no trace header and no metric', async () => {
    const streamPrefix = uniqueName('otel-off');
    const seen: Record<string, string>[] = [];
    const member = aMember(streamPrefix, 'a', { telemetry: false, handler: (message) => void seen.push(message.headers) });
    expect(member.options.telemetry).toBeUndefined();
    expect(member.coordinator.options.onHeartbeat).toBeUndefined();
    await member.start();
    await new StreamProducer(redis.client(), { streamPrefix, telemetry: false }).send({ key: 'k', payload: 1 });
    await pollUntil('handled', async () => seen.length === 1);
    expect(seen[0]).toEqual({});
    expect(spans.getFinishedSpans().filter((s) => s.name.endsWith(streamPrefix))).toEqual([]);
    expect(await points('rsc.consumer.owned_shards', streamPrefix)).toEqual([]);
    expect(await points('messaging.client.sent.messages', streamPrefix)).toEqual([]);
  });

  it('telemetry: "yes" is refused naming the option', () => {
    expect(() => new StreamProducer(redis.client(), { streamPrefix: 'x', telemetry: 'yes' as unknown as boolean })).toThrow(
      'telemetry must be a boolean, got "yes"',
    );
    expect(() => aMember('x', 'a', { telemetry: 'yes' as unknown as boolean })).toThrow('telemetry must be a boolean, got "yes"');
  });
});
