import { shortTier } from './short-tier';

/**
 * The short tier of the reliability harness (the long one: `npm run test:chaos`, docs/reliability.md):
 * every fault kind once, dealt out over two harnesses that run side by side
 * (test/reliability/short-tier.ts). `RSC_CHAOS_FAULTS=kind,kind` (or `all`) runs just those kinds,
 * in one harness.
 */
shortTier();
