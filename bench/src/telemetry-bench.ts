/**
 * npm run bench:telemetry — what OpenTelemetry costs a no-op pipeline. Each mode runs in a process of
 * its own (providers are process-wide): `off` (telemetry: false), `none` (the API installed, no
 * provider registered), `sdk` (meter and tracer providers registered: every entry gets a publish and
 * a process span and its metrics; spans are batched and dropped, metrics are collected once).
 * Prints entries/s for producing (sendBatch of 100) and for one member draining with a no-op handler.
 */
import { execFileSync } from 'node:child_process';
import { Redis } from 'ioredis';
import { CoordinatedMember, CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { runCli, until } from './cli';
import { elapsedMs } from './stats';

type Mode = 'off' | 'none' | 'sdk';
const TOTAL = Number(process.env.BENCH_TELEMETRY_ENTRIES ?? 100_000);
const SHARDS = 8;

async function registerSdk(): Promise<() => Promise<void>> {
  const { context, metrics, propagation, trace } = await import('@opentelemetry/api');
  const { AsyncLocalStorageContextManager } = await import('@opentelemetry/context-async-hooks');
  const { W3CTraceContextPropagator } = await import('@opentelemetry/core');
  const { InMemoryMetricExporter, AggregationTemporality, MeterProvider, PeriodicExportingMetricReader } = await import(
    '@opentelemetry/sdk-metrics'
  );
  const { BasicTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-base');
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  const dropSpans = {
    export: (_spans: unknown[], done: (result: { code: number }) => void) => done({ code: 0 }),
    shutdown: async () => undefined,
  };
  trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(dropSpans)] }));
  const reader = new PeriodicExportingMetricReader({
    exporter: new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE),
    exportIntervalMillis: 60_000,
  });
  metrics.setGlobalMeterProvider(new MeterProvider({ readers: [reader] }));
  return () => reader.forceFlush();
}

async function runMode(mode: Mode, url: string): Promise<{ produce: number; drain: number }> {
  const collect = mode === 'sdk' ? await registerSdk() : async () => undefined;
  const telemetry = mode !== 'off';
  const redis = new Redis(url);
  const streamPrefix = `bench-otel-${mode}`;
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: SHARDS });
  const producer = new StreamProducer(redis, { streamPrefix, telemetry });
  let start = process.hrtime.bigint();
  for (let sent = 0; sent < TOTAL; sent += 100) {
    await producer.sendBatch(Array.from({ length: 100 }, (_, i) => ({ key: `k${(sent + i) % 1000}`, payload: { n: sent + i } })));
  }
  const produce = TOTAL / (elapsedMs(start) / 1000);
  let handled = 0;
  const member = new CoordinatedMember(redis, {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: SHARDS,
    batchSize: 200,
    maxBufferedEntries: 200 * SHARDS * 2,
    telemetry,
    handler: () => {
      handled += 1;
    },
  });
  start = process.hrtime.bigint();
  await member.start();
  await until(() => handled >= TOTAL, 300_000);
  const drain = TOTAL / (elapsedMs(start) / 1000);
  await collect();
  await member.stop();
  redis.disconnect();
  return { produce, drain };
}

runCli(async () => {
  const [mode, url] = process.argv.slice(2) as [Mode | undefined, string | undefined];
  if (mode && url) {
    process.stdout.write(JSON.stringify(await runMode(mode, url)));
    return;
  }
  const server = await RedisServer.start();
  try {
    console.log(`${TOTAL} entries, ${SHARDS} shards, no-op handler, one member; entries/s`);
    console.log('| telemetry | produce (sendBatch 100) | member drain |\n| --- | ---: | ---: |');
    for (const m of ['off', 'none', 'sdk'] as Mode[]) {
      const out = execFileSync(process.execPath, [__filename, m, server.url], { encoding: 'utf8' });
      const { produce, drain } = JSON.parse(out) as { produce: number; drain: number };
      const label = { off: 'off (telemetry: false)', none: 'on, no provider registered', sdk: 'on, SDK metrics + tracing registered' }[m];
      console.log(`| ${label} | ${Math.round(produce)} | ${Math.round(drain)} |`);
    }
  } finally {
    await server.stop();
  }
});
