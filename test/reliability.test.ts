import { selectedFaultKinds } from './reliability/faults';
import { shortTier } from './reliability/short-tier';

/**
 * The short tier of the reliability harness (the long one: `npm run test:chaos`, docs/reliability.md),
 * first half: the fault kinds of the original harness and the new ones no issue-11 fix was needed
 * for. The other half (the kinds that failed before the fixes) is test/reliability-fixes.test.ts.
 * `RSC_CHAOS_FAULTS=kind,kind` (or `all`) runs just those kinds here, and nothing in the other file.
 */
shortTier('kinds no fix was needed for', selectedFaultKinds(process.env.RSC_CHAOS_FAULTS, 'plain'), 'npx vitest run test/reliability.test.ts');
