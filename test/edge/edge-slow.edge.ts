import { defineEdgeTier } from './edge-tier';

/**
 * The edge tier's slow cases (the most shards, the largest batches, buffers, lanes and workers):
 * `npm run test:edge` (docs/reliability.md, The edge tier); the quick ones run in `npm test`.
 */
defineEdgeTier('slow');
