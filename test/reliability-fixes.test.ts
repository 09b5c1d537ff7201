import { selectedFaultKinds } from './reliability/faults';
import { shortTier } from './reliability/short-tier';

/**
 * The short tier's second half: the fault kinds that failed on the code before the issue-11 fixes
 * (`needs` in test/reliability/faults.ts; docs/reliability.md lists what each one caught). Skipped
 * when RSC_CHAOS_FAULTS picks kinds (test/reliability.test.ts runs those).
 */
shortTier('kinds that failed before the issue-11 fixes', process.env.RSC_CHAOS_FAULTS ? [] : selectedFaultKinds(undefined, 'needs'), 'npx vitest run test/reliability.test.ts');
