import { ADMIN_CASES } from './admin-cases';
import { COORDINATOR_CASES } from './coordinator-cases';
import type { EdgeCase } from './edge-kit';
import { MEMBER_CASES } from './member-cases';
import { PRODUCER_CASES } from './producer-cases';
import { SCALE_CASES } from './scale-cases';
import { SURFACE_CASES } from './surface-cases';

/** Every case of the edge tier; test/edge/option-ranges.test.ts checks that each row of OPTION_RANGES has one. */
export const EDGE_CASES: readonly EdgeCase[] = [
  ...MEMBER_CASES,
  ...COORDINATOR_CASES,
  ...PRODUCER_CASES,
  ...ADMIN_CASES,
  ...SCALE_CASES,
  ...SURFACE_CASES,
];
