import { describe, expect, it } from 'vitest';
import { SWEEP_PHASES, sweepPhaseMs } from './shard-recovery';

describe('sweep phases (shard-recovery.ts)', () => {
  it('shards gained together are swept in SWEEP_PHASES groups spread over the interval, not in one burst', () => {
    const intervalMs = 5000;
    const phases = new Map<number, number[]>();
    for (let shard = 0; shard < 1024; shard++) {
      const phase = sweepPhaseMs(shard, intervalMs);
      expect(phase).toBeGreaterThanOrEqual(0);
      expect(phase).toBeLessThan(intervalMs);
      phases.set(phase, [...(phases.get(phase) ?? []), shard]);
    }
    expect([...phases.keys()].sort((a, b) => a - b)).toEqual(
      Array.from({ length: SWEEP_PHASES }, (_, i) => (i * intervalMs) / SWEEP_PHASES),
    );
    expect([...phases.values()].map((shards) => shards.length)).toEqual(Array(SWEEP_PHASES).fill(1024 / SWEEP_PHASES));
  });

  it('any SWEEP_PHASES consecutive shards (a member share) each get a phase of their own', () => {
    for (let first = 0; first < 100; first++) {
      const phases = Array.from({ length: SWEEP_PHASES }, (_, i) => sweepPhaseMs(first + i, 1000));
      expect(new Set(phases).size).toBe(SWEEP_PHASES);
    }
  });
});
