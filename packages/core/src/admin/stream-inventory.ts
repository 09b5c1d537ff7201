import type { KeyBuilder } from '../redis/keys';
import type { RedisClient } from '../redis/scripts';

const SCAN_COUNT = 1000;

/**
 * Every stream prefix with shard metadata under the key prefix, sorted. Found with SCAN (never
 * KEYS, which blocks Redis); on a Redis Cluster each master is scanned.
 */
export async function listStreamPrefixes(redis: RedisClient, keys: KeyBuilder): Promise<string[]> {
  const pattern = `${keys.keyPrefix}:{*}:meta`;
  const exact = new RegExp(`^${keys.keyPrefix.replace(/[.]/g, '\\.')}:\\{([A-Za-z0-9._-]{1,100})\\}:meta$`);
  const nodes = 'nodes' in redis && typeof redis.nodes === 'function' ? redis.nodes('master') : [redis];
  const found = new Set<string>();
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', SCAN_COUNT);
      for (const key of batch) {
        const match = exact.exec(key);
        if (match) found.add(match[1]);
      }
      cursor = next;
    } while (cursor !== '0');
  }
  return [...found].sort();
}
