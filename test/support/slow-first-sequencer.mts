import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * About how long each slow file of the tests project takes (seconds of its own, `--reporter=json`'s
 * endTime - startTime, measured at a load of 12-20, so only their order matters). The pool hands files
 * out in the order sorted here: the longest first, so that none of them starts near the end of the
 * run and keeps one worker busy while the others are idle (longest processing time first).
 */
export const SLOW_FILES_S: Readonly<Record<string, number>> = {
  'test/resharding/resharding.test.ts': 88,
  'test/nestjs/nestjs-demo-lifecycle.test.ts': 58,
  'test/dashboard/dashboard-handler.test.ts': 54,
  'test/cluster/cluster.test.ts': 51,
  'test/member/member-late-answers.test.ts': 46,
  'test/docs/readme-setup.test.ts': 45,
  'test/dashboard/dashboard-browser.test.ts': 44,
  'test/member/member-shared-reads.test.ts': 41,
  'test/member/member-runtime.test.ts': 39,
  'test/member/member-stuck-connection.test.ts': 38,
  'test/member/member-bad-days.test.ts': 35,
  'test/member/member-wake-ups.test.ts': 34,
  'test/consumption/member-shard-trouble.test.ts': 32,
  'test/operations/cli.test.ts': 30,
  'test/attacks/attack-member.test.ts': 26,
  'test/cluster/cluster-connections.test.ts': 26,
  'test/resharding/delete-drained-shards.test.ts': 26,
  'test/member/member-error-paths.test.ts': 24,
  'test/nestjs/nestjs-microservices.test.ts': 23,
  'test/member/member-buffer-budget.test.ts': 21,
  'test/coordinator/coordinator-invariants.test.ts': 19,
  'test/member/wake-hub.test.ts': 18,
  'test/attacks/attack-resize.test.ts': 18,
  'test/nestjs/nestjs-transport-seams.test.ts': 15,
  'test/member/member-lifecycle.test.ts': 15,
  'test/member/member-model.test.ts': 15,
  'test/delayed/delayed-delivery.test.ts': 15,
  'test/consumption/member-failures.test.ts': 15,
  'test/delayed/deferred-retries.test.ts': 14,
  'test/docs/recipes.test.ts': 14,
  'test/nestjs/nestjs-module.test.ts': 13,
  'test/nestjs/nestjs-testing-kit.test.ts': 13,
  'test/producer/merged-sends.test.ts': 13,
  'test/cluster/sentinel-demotion.test.ts': 13,
  'test/nestjs/nestjs-registry.test.ts': 12,
  'test/operations/admin-dead-letters.test.ts': 12,
  'test/consumption/member-batches.test.ts': 12,
  'test/coordinator/static-membership.test.ts': 11,
  'packages/core/src/assignor/sticky-assignor.spec.ts': 11,
};

/**
 * The short chaos tier (about 75 s, two harnesses side by side): in the same group as the other files,
 * it starts once every file of SLOW_FILES_S has started, so that the two other workers run the short
 * files beside it (about 200 s of them) rather than the slow ones. Started first, beside resharding,
 * a Nest demo process and the dashboard's 2,000-shard snapshots, on a machine loaded by other work its
 * member processes were starved past their heartbeat deadline once (revoke-twice unrecovered: "no answer
 * within N ms"); alone and last, it left a core idle for its whole run.
 */
export const CHAOS_TIER_FILE = 'test/reliability/reliability.test.ts';
/** Below every file of SLOW_FILES_S, above every other file. */
const CHAOS_TIER_WEIGHT = 0.5;

/**
 * Vitest orders the files of a run by the durations it cached on this machine, and without a cache
 * (CI's clean clone) by file size, largest first: a short file of 46 lines that runs 45 s then
 * started in the last tenth of the run. This keeps vitest's order of groups (groupOrder) and of
 * the other files, and moves the files of SLOW_FILES_S to the front of their group, whichever project
 * they belong to, longest first, wherever it runs; the chaos tier after them.
 */
export default class SlowFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const root = this.ctx.config.root;
    const seconds = (file: TestSpecification) => {
      const name = file.moduleId.slice(root.length + 1);
      return name === CHAOS_TIER_FILE ? CHAOS_TIER_WEIGHT : (SLOW_FILES_S[name] ?? 0);
    };
    const group = (file: TestSpecification) => file.project.config.sequence.groupOrder;
    // Array.prototype.sort is stable: files of equal weight keep vitest's order.
    return sorted
      .map((file, index) => ({ file, index }))
      .sort((a, b) => group(a.file) - group(b.file) || seconds(b.file) - seconds(a.file) || a.index - b.index)
      .map(({ file }) => file);
  }
}
