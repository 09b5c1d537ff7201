/** Which fault kinds a run makes: every kind that runs on its target, or a chosen few (RSC_CHAOS_FAULTS, --faults). */
import type { FaultKind } from './checker';
import { FAULTS } from './faults';
import type { TargetKind } from './target';

/** The fault kinds that can be made on `target`. */
export function faultKindsOn(target: TargetKind): FaultKind[] {
  return (Object.keys(FAULTS) as FaultKind[]).filter((kind) => (FAULTS[kind].runsOn ?? ['single']).includes(target));
}

/** Every fault kind of the single-node harness (the short tier's and the default soak's). */
export const ALL_FAULT_KINDS = faultKindsOn('single');

/**
 * The fault kinds of a run on `target`: RSC_CHAOS_FAULTS=all (or unset: `fallback`) for every kind
 * that runs there, or a comma-separated list of kinds.
 */
export function selectedFaultKinds(env = process.env.RSC_CHAOS_FAULTS, fallback?: FaultKind[], target: TargetKind = 'single'): FaultKind[] {
  const available = faultKindsOn(target);
  if (env === undefined || env.trim() === '') return fallback ?? available;
  if (env.trim() === 'all') return available;
  const kinds = env
    .split(',')
    .map((k) => k.trim())
    .filter(Boolean);
  for (const kind of kinds) {
    if (!(kind in FAULTS)) throw new Error(`RSC_CHAOS_FAULTS: unknown fault kind "${kind}"; known: all, ${Object.keys(FAULTS).join(', ')}`);
    if (!available.includes(kind as FaultKind))
      throw new Error(
        `RSC_CHAOS_FAULTS: fault kind "${kind}" does not run on a ${target === 'cluster' ? 'cluster' : 'single redis-server'}; there: all, ${available.join(', ')}`,
      );
  }
  return kinds as FaultKind[];
}
