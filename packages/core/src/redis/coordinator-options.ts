import { checkOption } from '../protocol/option-ranges';
import type { ShardAssignor } from '../assignor/assignor';
import type { HeartbeatRequest, HeartbeatResponse } from '../protocol/heartbeat';
import { StickyAssignor } from '../assignor/sticky-assignor';
import { DEFAULT_KEY_PREFIX } from './keys';

/** Settings of the coordinator itself; every member of a group should use the same ones. */
export interface CoordinatorOptions {
  /** First segment of every key. Default `rsc`. */
  keyPrefix?: string;
  /** Heartbeat interval told to members in a steady group. Default 3000 ms. */
  heartbeatIntervalMs?: number;
  /** Interval told to members with revocations or pending shards, or while a target is due. Default 50 ms. */
  fastHeartbeatIntervalMs?: number;
  /** How long the member asked to compute a target may take before another member is asked. Default 5000 ms. */
  assignmentTimeoutMs?: number;
  /** Wait this long after a group epoch change before computing a target, to batch a burst of joins. Default 0. */
  assignmentDelayMs?: number;
  /** How long LEFT and EXPIRED member records are kept. Default 24 h. */
  retentionMs?: number;
  /** At most this many LEFT and EXPIRED member records are kept. Default 1000. */
  retentionMaxCount?: number;
  /** Approximate length cap of the group's event stream. Default 10000. */
  eventLogMaxLen?: number;
  /** Computes targets. Default: the sticky assignor of SPEC section 4. */
  assignor?: ShardAssignor;
  /**
   * Called after each heartbeat script call with its round trip, its answer or its error: for
   * instrumentation (members use it for their heartbeat and rebalance metrics). It runs on the
   * heartbeat's path, so it must be quick; a throw is caught and ignored so that the protocol step
   * still counts. Not part of the group's configuration (members may differ in it).
   */
  onHeartbeat?: (observation: HeartbeatObservation) => void;
}

/** One heartbeat script call as `CoordinatorOptions.onHeartbeat` sees it. */
export interface HeartbeatObservation {
  request: HeartbeatRequest;
  /** From sending the script call to its reply (or failure), in milliseconds. */
  roundTripMs: number;
  /** The answer; undefined when the call failed. */
  response?: HeartbeatResponse;
  /** Why the call failed (Redis unreachable, script error); undefined when it was answered. */
  error?: unknown;
}

export type ResolvedCoordinatorOptions = Required<Omit<CoordinatorOptions, 'onHeartbeat'>> & Pick<CoordinatorOptions, 'onHeartbeat'>;

const DAY_MS = 86_400_000;

export function resolveCoordinatorOptions(options: CoordinatorOptions = {}): ResolvedCoordinatorOptions {
  const resolved: ResolvedCoordinatorOptions = {
    keyPrefix: options.keyPrefix ?? DEFAULT_KEY_PREFIX,
    heartbeatIntervalMs: options.heartbeatIntervalMs ?? 3000,
    fastHeartbeatIntervalMs: options.fastHeartbeatIntervalMs ?? 50,
    assignmentTimeoutMs: options.assignmentTimeoutMs ?? 5000,
    assignmentDelayMs: options.assignmentDelayMs ?? 0,
    retentionMs: options.retentionMs ?? DAY_MS,
    retentionMaxCount: options.retentionMaxCount ?? 1000,
    eventLogMaxLen: options.eventLogMaxLen ?? 10_000,
    assignor: options.assignor ?? new StickyAssignor(),
    onHeartbeat: options.onHeartbeat,
  };
  checkOption('coordinator.heartbeatIntervalMs', resolved.heartbeatIntervalMs);
  checkOption('coordinator.fastHeartbeatIntervalMs', resolved.fastHeartbeatIntervalMs);
  checkOption('coordinator.assignmentTimeoutMs', resolved.assignmentTimeoutMs);
  checkOption('coordinator.assignmentDelayMs', resolved.assignmentDelayMs);
  checkOption('coordinator.retentionMs', resolved.retentionMs);
  checkOption('coordinator.retentionMaxCount', resolved.retentionMaxCount);
  checkOption('coordinator.eventLogMaxLen', resolved.eventLogMaxLen);
  if (resolved.onHeartbeat !== undefined && typeof resolved.onHeartbeat !== 'function') {
    throw new TypeError(`onHeartbeat must be a function, got ${typeof resolved.onHeartbeat}`);
  }
  if (typeof resolved.assignor?.assign !== 'function') {
    throw new TypeError('assignor must be an object with an assign(input) method');
  }
  return resolved;
}

/** ARGV[1..7] of every group script, in the order `includes/config.lua` reads them (ARGV[8] is the group's wake channel). */
export function configArgs(options: ResolvedCoordinatorOptions): number[] {
  return [
    options.heartbeatIntervalMs,
    options.fastHeartbeatIntervalMs,
    options.assignmentTimeoutMs,
    options.assignmentDelayMs,
    options.retentionMs,
    options.retentionMaxCount,
    options.eventLogMaxLen,
  ];
}
