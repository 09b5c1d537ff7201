import { shortTier } from './reliability/short-tier';

/**
 * The short tier of the reliability harness (the long one: `npm run test:chaos`, docs/reliability.md),
 * file 1 of 3: every fault kind runs once, in one of three files that vitest runs in parallel
 * (test/reliability/short-tier.ts balances them). `RSC_CHAOS_FAULTS=kind,kind` (or `all`) runs just
 * those kinds here, and nothing in the other files.
 */
shortTier(1);
