import { checkOption, type CoordinatorAdmin, parseDeadLetterRef } from '@redis-stream-coordinator/core';
import type { DashboardListeners } from './dashboard-options';
import { DashboardHttpError } from './http-replies';

/** What an action changes, for the 'action' event and the answer. */
export interface DashboardActionResult {
  action: string;
  target: string;
  result: unknown;
}

/** Pause or resume a listener of the application (its members keep their shards and heartbeats). */
export function listenerAction(listeners: DashboardListeners | undefined, id: string, verb: 'pause' | 'resume'): DashboardActionResult {
  if (!listeners) throw new DashboardHttpError(404, 'this dashboard was given no listeners (the listeners option)');
  const listener = listeners.list().find((l) => l.id === id);
  if (!listener) throw new DashboardHttpError(404, `no listener with id ${JSON.stringify(id)}`);
  if (verb === 'pause') listeners.pause(id);
  else listeners.resume(id);
  return { action: verb, target: `listener ${id}`, result: listeners.list().find((l) => l.id === id) ?? null };
}

/** Replays (writes again to its key, then deletes) or purges one dead letter, named by its ref. */
export async function deadLetterAction(
  admin: CoordinatorAdmin,
  streamPrefix: string,
  consumerGroup: string,
  verb: 'replay' | 'purge',
  body: Record<string, unknown>,
): Promise<DashboardActionResult> {
  const ref = body.ref;
  if (typeof ref !== 'string')
    throw new DashboardHttpError(400, `ref must be a dead letter ref like 3/1764505000000-0, got ${JSON.stringify(ref)}`);
  try {
    parseDeadLetterRef(ref);
  } catch (error) {
    throw new DashboardHttpError(400, (error as Error).message);
  }
  const result =
    verb === 'replay'
      ? await admin.replayDeadLetter(streamPrefix, consumerGroup, ref)
      : await admin.purgeDeadLetter(streamPrefix, consumerGroup, ref);
  return { action: `${verb} dead letter`, target: `${streamPrefix}/${consumerGroup} ${ref}`, result };
}

/** Starts a resize of the stream (ordered); its groups' cutovers show on their pages. */
export async function resizeAction(
  admin: CoordinatorAdmin,
  streamPrefix: string,
  body: Record<string, unknown>,
): Promise<DashboardActionResult> {
  let shardCount: number;
  try {
    shardCount = checkOption('shardCount', body.shardCount);
  } catch (error) {
    throw new DashboardHttpError(400, (error as Error).message);
  }
  const result = await admin.resizeShards(streamPrefix, shardCount);
  return { action: 'resize', target: `stream ${streamPrefix}`, result };
}
