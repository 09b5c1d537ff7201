/**
 * npm run bench:nest [-- --quick]
 *
 * The cost of Nest's pipeline for a no-op handler: one member drains pre-filled shards (as in
 * scenario 1) as a bare CoordinatedMember, as a @StreamListener with no enhancer (called directly),
 * and as a @StreamListener with one pass-through interceptor (through ExternalContextCreator).
 * Cases alternate within each repetition so drift on a shared machine hits them alike; prints the
 * medians and the ratios to the bare member.
 */
import 'reflect-metadata';
import { type CallHandler, type ExecutionContext, Injectable, Module, type NestInterceptor, UseInterceptors } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Redis } from 'ioredis';
import { CoordinatorAdmin, StreamProducer } from '@redis-stream-coordinator/core';
import { CoordinatorModule, StreamListener } from '@redis-stream-coordinator/nestjs';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { runCli, until } from './cli';
import { memberDrain } from './member-bench';
import { elapsedMs, spread } from './stats';

const SHARDS = 8;
const BATCH = 100;
const quick = process.argv.includes('--quick');
const total = quick ? 20_000 : 100_000;
const repetitions = quick ? 2 : 5;

type Case = 'member' | 'listener' | 'listener + interceptor';

async function fill(redis: Redis, streamPrefix: string): Promise<void> {
  await new CoordinatorAdmin(redis).createStream({ streamPrefix, shardCount: SHARDS });
  const producer = new StreamProducer(redis, { streamPrefix });
  for (let i = 0; i < total; i += 1000) {
    await producer.sendBatch(
      Array.from({ length: Math.min(1000, total - i) }, (_, j) => ({ key: `key-${(i + j) % 1000}`, payload: { i: i + j } })),
    );
  }
}

@Injectable()
class PassThrough implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler) {
    return next.handle();
  }
}

/** A Nest application with one no-op listener; entries/s from creating the application to the last ack. */
async function listenerDrain(url: string, streamPrefix: string, intercepted: boolean): Promise<number> {
  let handled = 0;
  const options = {
    streamPrefix,
    consumerGroup: 'bench',
    runtimeMaxConcurrency: SHARDS,
    batchSize: BATCH,
    maxBufferedEntries: BATCH * SHARDS * 2,
  };
  @Injectable()
  class Plain {
    @StreamListener(options)
    handle() {
      handled += 1;
    }
  }
  @Injectable()
  class Intercepted {
    @StreamListener(options)
    @UseInterceptors(PassThrough)
    handle() {
      handled += 1;
    }
  }
  @Module({ imports: [CoordinatorModule.forRoot({ redis: { url } })], providers: [intercepted ? Intercepted : Plain] })
  class BenchModule {}
  const redis = new Redis(url);
  const admin = new CoordinatorAdmin(redis);
  const start = process.hrtime.bigint();
  const app = await NestFactory.createApplicationContext(BenchModule, { logger: false });
  await until(() => handled >= total, 300_000);
  await until(async () => (await admin.describeGroup(streamPrefix, 'bench')).shards.every((s) => s.pending === 0), 60_000);
  const seconds = elapsedMs(start) / 1000;
  await app.close();
  redis.disconnect();
  return total / seconds;
}

async function main(): Promise<void> {
  const server = await RedisServer.start();
  const redis = new Redis(server.url);
  const rates: Record<Case, number[]> = { member: [], listener: [], 'listener + interceptor': [] };
  try {
    for (let run = 0; run < repetitions; run++) {
      for (const kind of Object.keys(rates) as Case[]) {
        const streamPrefix = `nest-${run}-${kind.replace(/\W+/g, '-')}`;
        await fill(redis, streamPrefix);
        const rate =
          kind === 'member'
            ? await memberDrain(server.url, streamPrefix, SHARDS, total, BATCH)
            : await listenerDrain(server.url, streamPrefix, kind !== 'listener');
        rates[kind].push(rate);
        process.stderr.write(`run ${run + 1}: ${kind} ${Math.round(rate)}/s\n`);
      }
    }
  } finally {
    redis.disconnect();
    await server.stop();
  }
  const base = spread(rates.member).median;
  console.log(`no-op drain of ${total.toLocaleString('en-US')} entries over ${SHARDS} shards, median of ${repetitions}`);
  for (const kind of Object.keys(rates) as Case[]) {
    const { median } = spread(rates[kind]);
    console.log(
      `${kind.padEnd(24)} ${Math.round(median).toString().padStart(8)}/s  ${((median / base) * 100).toFixed(1)} % of the bare member`,
    );
  }
}

runCli(main);
