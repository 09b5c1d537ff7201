import { checkOption } from '@redis-stream-coordinator/core';
import type { SeenMessage } from './entry-log';

/** `failNext`'s count, checked against its row of OPTION_RANGES. */
export function checkFailNextCount(count: unknown): number {
  return checkOption('nestjs.testing.failNext.count', count, { label: 'CoordinatorTesting.failNext: count' });
}

/** The error an injected failure throws when the test gives none: its message says where it came from. */
export class InjectedFailureError extends Error {
  override readonly name = 'InjectedFailureError';
}

/** A failure rule of `failNext` or `failWhen`; `remove()` ends it before it is used up. */
export interface InjectedFailure {
  /** How many attempts it failed so far. */
  readonly failed: number;
  /** Attempts it will still fail (Infinity for `failWhen`). */
  readonly remaining: number;
  remove(): void;
}

interface Rule extends InjectedFailure {
  stream: string;
  group: string;
  matches(message: SeenMessage): boolean;
  error(message: SeenMessage, n: number): Error;
  take(): void;
}

/**
 * The failures a test asked for, per group: an attempt of a matching entry fails with the rule's
 * error instead of running the handler (the handler never sees it), so the member retries it, backs
 * off and dead-letters it as it would a handler's own exception.
 */
export class InjectedFailures {
  private rules: Rule[] = [];

  add(
    stream: string,
    group: string,
    count: number,
    matches: (message: SeenMessage) => boolean,
    error: Error | string | undefined,
    describe: string,
  ): InjectedFailure {
    let failed = 0;
    let remaining = count;
    const rules = this;
    const rule: Rule = {
      stream,
      group,
      get failed() {
        return failed;
      },
      get remaining() {
        return remaining;
      },
      matches,
      error: (message, n) =>
        error instanceof Error
          ? error
          : new InjectedFailureError(
              error ?? `injected failure ${n}${count === Infinity ? '' : ` of ${count}`} (${describe}) of entry ${message.id}`,
            ),
      take() {
        failed += 1;
        remaining -= 1;
        if (remaining <= 0) rules.rules = rules.rules.filter((r) => r !== rule);
      },
      remove() {
        remaining = 0;
        rules.rules = rules.rules.filter((r) => r !== rule);
      },
    };
    this.rules.push(rule);
    return rule;
  }

  /** The error to fail this attempt with (the first rule of the group that matches, used up by one), or undefined. */
  take(stream: string, group: string, message: SeenMessage): Error | undefined {
    const rule = this.rules.find((r) => r.stream === stream && r.group === group && r.matches(message));
    if (!rule) return undefined;
    rule.take();
    return rule.error(message, rule.failed);
  }

  clear(): void {
    this.rules = [];
  }
}
