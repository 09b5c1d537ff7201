import type { DeadLetterOptions } from '@redis-stream-coordinator/core';

/**
 * Member options that are never module-wide defaults, and why: each names one member, one stream or
 * one handler, or changes what the handler receives. `MemberDefaults` leaves them out; a default
 * given anyway (plain JavaScript, a config file) is refused at startup rather than ignored or
 * turned into a confusing error of the first listener.
 */
const NOT_DEFAULTS: Record<string, string> = {
  streamPrefix: 'each listener and consumer names its stream',
  consumerGroup: 'each listener and consumer names its group',
  handler: 'each listener and consumer has its own',
  memberId: 'it names one member (every member would get the same)',
  memberInstanceId: 'it names one member (every member would get the same); set it on each listener or consumer',
  memberName: 'it names one member; set it on each listener or consumer',
  coordinator: "use the module's coordinator option",
  batch: 'it changes what a handler receives (an array of messages); set it on each listener or consumer that takes batches',
};

/** Refuses a `defaults` that is not an object or holds an option that cannot be a default; `where` prefixes the error. */
export function assertMemberDefaults(defaults: unknown, where: string): void {
  if (defaults === undefined) return;
  if (defaults === null || typeof defaults !== 'object' || Array.isArray(defaults)) {
    throw new TypeError(`${where}: defaults must be an object of member options, got ${JSON.stringify(defaults)}`);
  }
  for (const [option, why] of Object.entries(NOT_DEFAULTS)) {
    if ((defaults as Record<string, unknown>)[option] !== undefined)
      throw new TypeError(`${where}: defaults.${option} cannot be a default: ${why}`);
  }
}

/** The options that decide a member's workers, at one level (its own options, or the module's defaults). */
interface WorkerOptions {
  runtimeMaxConcurrency?: number;
  lanes?: number;
}

/**
 * A member's `runtimeMaxConcurrency` from its levels of options, the most specific first (its own,
 * then the module's `defaults`; the transport has three): the most specific level that says
 * anything about workers decides, with its `runtimeMaxConcurrency`, else its `lanes` (as the core
 * member derives it). So a listener's own `lanes: 16` gets 16 workers even under a module-wide
 * `runtimeMaxConcurrency: 4`, and the module's `runtimeMaxConcurrency` applies where the listener
 * sets neither. Undefined: no level sets either, the core default (1) applies.
 */
export function workersOf(levels: readonly (WorkerOptions | undefined)[]): number | undefined {
  for (const level of levels) {
    if (level?.runtimeMaxConcurrency !== undefined) return level.runtimeMaxConcurrency;
    if (level?.lanes !== undefined) return level.lanes;
  }
  return undefined;
}

/**
 * The module's `defaults.deadLetter` and a listener's or consumer's own, field by field (the own
 * wins): a module-wide `maxLen`, `nonRetryableErrors` or `onDeadLetter` stays when a listener names
 * only its destination. Anything that is not an object is passed on as it is, for the member to refuse.
 */
export function mergeDeadLetter(defaults: unknown, own: unknown): DeadLetterOptions | undefined {
  const isObject = (value: unknown): value is DeadLetterOptions => value !== null && typeof value === 'object' && !Array.isArray(value);
  if (own === undefined) return defaults as DeadLetterOptions | undefined;
  if (defaults === undefined) return own as DeadLetterOptions;
  if (!isObject(defaults)) return defaults as DeadLetterOptions; // a bad default is refused, not hidden
  if (!isObject(own)) return own as DeadLetterOptions;
  return { ...defaults, ...own };
}

/**
 * Where a member's bad option came from, for its error: ` (from CoordinatorModule defaults.x)` when
 * the message is about an option `x` that the module's `defaults` gave and the listener or bean did
 * not set, so that the user looks where the value is; '' otherwise. Core option errors begin with
 * the option's name (`sessionTimeoutMs must be …`, `deadLetter.maxLen …`).
 */
export function fromDefaults(message: string, own: object, defaults: object | undefined): string {
  const option = Object.keys(defaults ?? {}).find(
    (key) => !Object.hasOwn(own, key) && message.startsWith(key) && !/[A-Za-z0-9_]/.test(message.charAt(key.length)),
  );
  return option === undefined ? '' : ` (from CoordinatorModule defaults.${option})`;
}
