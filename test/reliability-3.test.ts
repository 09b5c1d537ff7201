import { shortTier } from './reliability/short-tier';

/** The short tier of the reliability harness, file 3 of 3 (test/reliability.test.ts says how it is split). */
shortTier(3);
