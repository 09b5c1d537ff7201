import type { Redis } from 'ioredis';

export interface CommandStat {
  calls: number;
  usec: number;
  usecPerCall: number;
}

/** Resets `INFO commandstats` so the next reading covers one measured phase only. */
export async function resetCommandStats(redis: Redis): Promise<void> {
  await redis.config('RESETSTAT');
}

/**
 * Server-side cost of our scripts since the last reset: EVALSHA plus EVAL (ioredis falls back to
 * EVAL once per script and connection, when Redis does not know the script yet).
 */
export async function scriptStat(redis: Redis): Promise<CommandStat> {
  const info = await redis.info('commandstats');
  let calls = 0;
  let usec = 0;
  for (const line of info.split('\n')) {
    if (!line.startsWith('cmdstat_evalsha:') && !line.startsWith('cmdstat_eval:')) continue;
    const fields = Object.fromEntries(
      line
        .slice(line.indexOf(':') + 1)
        .trim()
        .split(',')
        .map((pair) => pair.split('=') as [string, string]),
    );
    calls += Number(fields.calls);
    usec += Number(fields.usec);
  }
  return { calls, usec, usecPerCall: calls === 0 ? 0 : usec / calls };
}

export async function redisVersion(redis: Redis): Promise<string> {
  const info = await redis.info('server');
  return /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
}
