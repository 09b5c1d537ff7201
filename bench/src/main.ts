/**
 * npm run bench [-- --quick] [-- --json]
 *
 * Starts a private redis-server (no persistence), measures the coordinator for groups of 10, 100
 * and 1,000 members with 10 shards each, prints progress on stderr, and writes docs/benchmarks.md.
 * --quick: smaller runs for a smoke test (the report says so). --json: the figures as JSON on stdout.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { type CoordinatorFigures, measureCoordinator } from './coordinator-bench';
import { latency, rebalance, throughput } from './member-bench';
import { redisVersion } from './redis-stats';
import { coordinatorReport, type Environment, type MemberFigures, memberReport } from './report';
import { spread } from './stats';

const args = new Set(process.argv.slice(2));
const quick = args.has('--quick');
const json = args.has('--json');
const progress = (line: string) => process.stderr.write(`${line}\n`);

function packageVersion(name: string): string {
  return (require(`${name}/package.json`) as { version: string }).version;
}

async function main(): Promise<void> {
  const server = await RedisServer.start();
  const redis = new Redis(server.url);
  try {
    const environment: Environment = {
      date: new Date().toISOString().slice(0, 10),
      cpus: `${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown'}`,
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      node: process.version,
      redis: await redisVersion(redis),
      ioredis: packageVersion('ioredis'),
      quick,
    };
    progress(`redis-server ${environment.redis} on port ${server.port}; ${quick ? 'quick' : 'full'} run`);
    const figures: CoordinatorFigures[] = [];
    for (const members of [10, 100, 1000]) {
      progress(`coordinator: ${members} members, ${members * 10} shards`);
      figures.push(
        await measureCoordinator(redis, members, {
          steadyCalls: quick ? 2_000 : 20_000,
          commitSamples: quick ? 3 : 7,
          progress,
        }),
      );
    }
    const runs = quick ? 1 : 3;
    const total = quick ? 40_000 : 200_000;
    progress(`throughput: ${total} entries over 8 shards, ${runs} run(s)`);
    const tput: { raw: number; member: number }[] = [];
    for (let run = 0; run < runs; run++) tput.push(await throughput(server.url, run, total, progress));
    progress('latency at 5,000 entries/s');
    const lat = await latency(server.url, 5000, quick ? 3 : 10);
    const rebalances: MemberFigures['rebalanceMs'] = [];
    for (const members of [4, 16, 64]) {
      progress(`rebalance: ${members} members`);
      const samples: number[] = [];
      for (let run = 0; run < runs; run++) samples.push(await rebalance(server.url, members));
      rebalances.push({ members, shards: members * 4, ms: spread(samples) });
    }
    const memberFigures: MemberFigures = {
      total,
      runs,
      raw: spread(tput.map((t) => t.raw)),
      member: spread(tput.map((t) => t.member)),
      ratio: spread(tput.map((t) => t.member / t.raw)),
      latency: lat,
      rebalanceMs: rebalances,
    };
    const report = coordinatorReport(environment, figures) + memberReport(memberFigures);
    const target = path.resolve(__dirname, '../../docs/benchmarks.md');
    fs.writeFileSync(target, report);
    progress(`wrote ${path.relative(process.cwd(), target)}`);
    if (json) process.stdout.write(`${JSON.stringify({ environment, coordinator: figures, members: memberFigures }, null, 2)}\n`);
  } finally {
    redis.disconnect();
    await server.stop();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
