import { describe, it } from 'vitest';
import { useRedisServer } from '../support/vitest-redis';
import { type EdgeTier, EdgeEnv } from './edge-kit';
import { EDGE_CASES } from './edge-cases';

/** The file that runs each tier: option-ranges.test.ts checks that its config runs it. */
export const TIER_FILES: Record<EdgeTier, string> = {
  quick: 'test/edge/edge-quick.test.ts',
  slow: 'test/edge/edge-slow.edge.ts',
};

/**
 * The cases of one tier, each a test on the file's own redis-server, run one after the other
 * (several rebalances at once on a 2-core machine would time one another out).
 */
export function defineEdgeTier(tier: EdgeTier): void {
  const redis = useRedisServer();
  describe(`the edge tier (${tier}): options at the maxima of OPTION_RANGES`, () => {
    for (const edge of EDGE_CASES.filter((c) => c.tier === tier)) {
      it(
        `${edge.title} [${edge.covers.join(', ')}]`,
        async () => {
          const env = new EdgeEnv(redis);
          try {
            await edge.run(env);
          } catch (error) {
            // What the members said is most of the story when a case fails.
            const said = [...new Set(env.errors)].slice(0, 3);
            if (said.length === 0) throw error;
            throw new Error(`${(error as Error).message}; the members reported: ${said.join('; ')}`, { cause: error });
          } finally {
            await env.end();
          }
        },
        edge.timeoutMs,
      );
    }
  });
}
