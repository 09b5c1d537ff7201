/**
 * npm run bench:profile [-- --json]
 *
 * Where scenario 2 saturates: one member with 64 workers drains 150,000 pre-filled entries over 64
 * shards with a handler that awaits ~1 ms, under the V8 CPU profiler (the fill is not profiled).
 * Prints the rate and the functions with the most self time.
 */
import inspector from 'node:inspector';
import os from 'node:os';
import { Redis } from 'ioredis';
import { CoordinatedMember } from '@redis-stream-coordinator/core';
import { RedisServer } from '@redis-stream-coordinator/core/testing';
import { runCli, until } from './cli';
import { fill } from './io-bench';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
}

async function main(): Promise<void> {
  const server = await RedisServer.start();
  const redis = new Redis(server.url);
  const total = 150_000;
  process.stderr.write(`filling ${total} entries over 64 shards\n`);
  await fill(redis, 'io', total);
  const session = new inspector.Session();
  session.connect();
  const post = <T>(method: string) =>
    new Promise<T>((resolve, reject) => session.post(method, (error, result) => (error ? reject(error) : resolve(result as T))));
  await post('Profiler.enable');
  await post('Profiler.start');
  process.stderr.write('draining with 64 workers, profiled\n');
  let handled = 0;
  const member = new CoordinatedMember(redis, {
    streamPrefix: 'io',
    consumerGroup: 'profile',
    runtimeMaxConcurrency: 64,
    handler: async () => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      handled += 1;
    },
  });
  const start = Date.now();
  await member.start();
  await until(() => handled >= total, 600_000);
  const rate = total / ((Date.now() - start) / 1000);
  const { profile } = await post<{ profile: { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] } }>('Profiler.stop');
  const time = new Map<number, number>();
  for (const [i, id] of profile.samples.entries()) time.set(id, (time.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
  const self = new Map<string, number>();
  let sum = 0;
  for (const node of profile.nodes) {
    const t = time.get(node.id) ?? 0;
    sum += t;
    const where = node.callFrame.url.split('/').slice(-2).join('/');
    const name = `${node.callFrame.functionName || '(anonymous)'}${where ? ` ${where}` : ''}`;
    self.set(name, (self.get(name) ?? 0) + t);
  }
  const top = [...self]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 15)
    .map(([name, t]) => ({ share: t / sum, name }));
  if (process.argv.includes('--json')) {
    process.stdout.write(`${JSON.stringify({ rate, top }, null, 2)}\n`);
  } else {
    process.stdout.write(
      `${Math.round(rate)} entries/s (ideal 64,000); load average ${os
        .loadavg()
        .map((n) => n.toFixed(1))
        .join(' / ')}\nself time:\n`,
    );
    for (const { share, name } of top) process.stdout.write(`${(share * 100).toFixed(1).padStart(6)} %  ${name}\n`);
  }
  await member.stop();
  redis.disconnect();
  await server.stop();
}

runCli(main);
