import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * About how long each slow file of the tests project takes (seconds of its own, `--reporter=json`'s
 * endTime - startTime, in a whole `npm test` on the quiet 2-core machine, chromium installed, the
 * browser file's 14 s alone rounded up for the load). The pool hands files out in the order sorted here: the longest first, so that none of them starts near the end of the
 * run and keeps one worker busy while the others are idle (longest processing time first).
 */
export const SLOW_FILES_S: Readonly<Record<string, number>> = {
  'test/member/member-late-answers.test.ts': 42,
  'test/member/member-wake-ups.test.ts': 42,
  'test/member/member-stuck-connection.test.ts': 31,
  'test/cluster/cluster.test.ts': 27,
  'test/dashboard/dashboard-handler.test.ts': 26,
  'test/delayed/delayed-resize.test.ts': 33,
  'test/attacks/attack-member.test.ts': 24,
  'test/resharding/delete-drained-shards.test.ts': 22,
  'test/consumption/member-shard-trouble.test.ts': 21,
  'test/member/member-error-paths.test.ts': 20,
  'test/delayed/deferred-order.test.ts': 24,
  'test/delayed/deferred-order-ahead.test.ts': 18,
  'test/delayed/delayed-resize-givers-attack.test.ts': 23,
  'test/delayed/delayed-resize-givers-cache.test.ts': 20,
  'test/dashboard/dashboard-browser.test.ts': 18,
  'test/attacks/attack-resize.test.ts': 17,
  'test/member/wake-hub.test.ts': 16,
  'test/member/member-shared-reads.test.ts': 14,
  'test/member/member-lifecycle.test.ts': 13,
  'test/resharding/resharding.test.ts': 13,
  'test/member/member-model.test.ts': 12,
  'test/nestjs/nestjs-demo-lifecycle.test.ts': 12,
  'test/delayed/delayed-delivery.test.ts': 11,
  'test/member/member-bad-days.test.ts': 11,
  'test/delayed/deferred-retries.test.ts': 10,
};

/**
 * The short chaos tier (about 85 s, two harnesses side by side), the longest file of the run: it starts
 * at once, in the third of the five workers, beside the files that wait on late and missing answers
 * and stuck connections (mostly timers, little CPU), and ends well before the run does.
 * Started once every slow file had started (at 188 s of 317), it ended 40 s before the run, and the
 * files queued behind it ran late: npm test took past 5 minutes. Started first, beside resharding, a
 * Nest demo process and the dashboard's 2,000-shard snapshots, on a machine loaded by other work its
 * member processes were starved past their heartbeat deadline once (revoke-twice unrecovered: "no
 * answer within N ms").
 */
export const CHAOS_TIER_FILE = 'test/reliability/reliability.test.ts';
/** Below the two files of 42 s, above every other file. */
const CHAOS_TIER_WEIGHT = 41.5;

/**
 * Vitest orders the files of a run by the durations it cached on this machine, and without a cache
 * (CI's clean clone) by file size, largest first: a short file of 46 lines that runs 45 s then
 * started in the last tenth of the run. This keeps vitest's order of groups (groupOrder) and of
 * the other files, and moves the files of SLOW_FILES_S to the front of their group, whichever project
 * they belong to, longest first, wherever it runs, the chaos tier among them.
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
