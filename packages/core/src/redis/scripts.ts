import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { ChainableCommander, Cluster, Redis } from 'ioredis';

/** Either client: they share one command surface, so everything here works on both. */
export type RedisClient = Redis | Cluster;

const LUA_DIR = path.join(__dirname, 'lua');
const INCLUDE = /^--- @include "([\w/]+)"\s*$/;
const VERSION: string = require('../../package.json').version;

/** Script name -> file; the file name carries the number of keys it takes. */
const SCRIPT_FILES = {
  heartbeat: 'heartbeat-14.lua',
  commitAssignment: 'commitAssignment-14.lua',
  describeGroup: 'describeGroup-14.lua',
  createStream: 'createStream-1.lua',
  claimShard: 'claimShard-2.lua',
  ackFenced: 'ackFenced-2.lua',
  ackFencedMany: 'ackFencedMany-n.lua',
  claimPending: 'claimPending-2.lua',
  deadLetterFenced: 'deadLetterFenced-3.lua',
  resizeShards: 'resizeShards-n.lua',
  completeCutover: 'completeCutover-14.lua',
  retireShards: 'retireShards-n.lua',
  deleteRetiredShard: 'deleteRetiredShard-n.lua',
  endShardRetirement: 'endShardRetirement-1.lua',
  firstAfter: 'firstAfter-n.lua',
  appendEntries: 'appendEntries-5.lua',
  appendEntriesMany: 'appendEntriesMany-n.lua',
  releaseDue: 'releaseDue-8.lua',
  acceptMove: 'acceptMove-5.lua',
  deferFenced: 'deferFenced-5.lua',
  parkFenced: 'parkFenced-5.lua',
  ensureRouting: 'ensureRouting-1.lua',
  claimDeadLetterReplay: 'claimDeadLetterReplay-2.lua',
  dropDeadLetter: 'dropDeadLetter-2.lua',
  updateDeadLetterReplay: 'updateDeadLetterReplay-2.lua',
  replayEntry: 'replayEntry-4.lua',
  trimShard: 'trimShard-1.lua',
  resetShardOffset: 'resetShardOffset-2.lua',
  readSchedule: 'readSchedule-2.lua',
  readScheduleHeads: 'readScheduleHeads-3.lua',
  scheduleBound: 'scheduleBound-2.lua',
  makeScheduledDue: 'makeScheduledDue-3.lua',
  dropScheduled: 'dropScheduled-3.lua',
} as const;

export type ScriptName = keyof typeof SCRIPT_FILES;

/** Resolves `--- @include "includes/x"` lines, each include pulled in once, so nothing is copied. */
export function loadScriptSource(file: string): string {
  const seen = new Set<string>();
  const expand = (relative: string): string =>
    fs
      .readFileSync(path.join(LUA_DIR, relative), 'utf8')
      .split('\n')
      .map((line) => {
        const include = INCLUDE.exec(line);
        if (!include) return line;
        if (seen.has(include[1])) return '';
        seen.add(include[1]);
        return expand(`${include[1]}.lua`);
      })
      .join('\n');
  return expand(file);
}

/** The file name carries the number of keys; `-n` means the caller passes it (variable key lists). */
function keyCount(file: string): number | undefined {
  const count = /-(\d+|n)\.lua$/.exec(file)?.[1];
  return count === undefined || count === 'n' ? undefined : Number(count);
}

/** Command names carry the library version, so two versions sharing one client cannot clash. */
const COMMAND_PREFIX = `rsc_${VERSION.replace(/\W/g, '_')}_`;

function commandName(script: ScriptName): string {
  return COMMAND_PREFIX + script;
}

/** Per script, the number of keys its file name states (undefined: the caller passes it); read once, used on every call. */
const KEY_COUNTS = new Map((Object.keys(SCRIPT_FILES) as ScriptName[]).map((name) => [name, keyCount(SCRIPT_FILES[name])]));

let sources: Map<ScriptName, string> | undefined;
const defined = new WeakSet<object>();

/**
 * Defines the coordinator scripts on a client (once per client) with ioredis `defineCommand`:
 * EVALSHA, with a transparent reload after `NOSCRIPT` (e.g. after a Redis restart or SCRIPT FLUSH).
 */
export function runScript(client: RedisClient, script: ScriptName, keys: string[], args: (string | number | Buffer)[]): Promise<unknown> {
  const command = (client as unknown as Record<string, (...a: (string | number | Buffer)[]) => Promise<unknown>>)[
    defineScripts(client, script)
  ];
  return command.call(client, ...scriptArguments(script, keys, args));
}

/** `runScript` with Buffer replies (ioredis' `<command>Buffer`): for a script that returns bytes as they are. */
export function runScriptBuffer(
  client: RedisClient,
  script: ScriptName,
  keys: string[],
  args: (string | number | Buffer)[],
): Promise<unknown> {
  const command = (client as unknown as Record<string, (...a: (string | number | Buffer)[]) => Promise<unknown>>)[
    `${defineScripts(client, script)}Buffer`
  ];
  return command.call(client, ...scriptArguments(script, keys, args));
}

/**
 * `runScript` as one plain `EVALSHA` command: none of the per-call wrapping of ioredis' script
 * commands (argument copies, a closure and two more promises per call), for a caller that runs one
 * script call at a time on its hot path (the producer's single shard call). After `NOSCRIPT` (a
 * restart, SCRIPT FLUSH: nothing ran) the call goes through `runScript`, which sends the source.
 */
export async function runScriptBySha(
  client: RedisClient,
  script: ScriptName,
  keys: string[],
  args: (string | number | Buffer)[],
): Promise<unknown> {
  const command: (string | number | Buffer)[] = [shaOf(script), keys.length];
  for (const key of keys) command.push(key);
  for (const arg of args) command.push(arg);
  try {
    return await client.call('evalsha', command);
  } catch (error) {
    if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
    return runScript(client, script, keys, args);
  }
}

const shas = new Map<ScriptName, string>();

/** The SHA1 of a script's source (includes resolved), as EVALSHA names it; computed once. */
function shaOf(script: ScriptName): string {
  let sha = shas.get(script);
  if (sha === undefined) {
    sha = createHash('sha1').update(scriptSource(script)).digest('hex');
    shas.set(script, sha);
  }
  return sha;
}

/**
 * Adds a script call to a pipeline. The scripts must be defined on the pipeline's client before the
 * pipeline is made (`ensureScripts`): a pipeline only has the commands its client had then.
 */
export function pipelineScript(pipeline: ChainableCommander, script: ScriptName, keys: string[], args: (string | number | Buffer)[]): void {
  const command = (pipeline as unknown as Record<string, ((...a: (string | number | Buffer)[]) => unknown) | undefined>)[
    commandName(script)
  ];
  if (!command) throw new Error(`script ${script} is not defined on the pipeline's client: call ensureScripts(client) first`);
  command.call(pipeline, ...scriptArguments(script, keys, args));
}

/** Defines the scripts on a client, once. */
export function ensureScripts(client: RedisClient): void {
  defineScripts(client, 'heartbeat');
}

function scriptArguments(script: ScriptName, keys: string[], args: (string | number | Buffer)[]): (string | number | Buffer)[] {
  return KEY_COUNTS.get(script) === undefined ? [keys.length, ...keys, ...args] : (keys as (string | number | Buffer)[]).concat(args);
}

/**
 * The scripts that write nothing and may read a replica a little behind (ioredis sends them there
 * with `scaleReads`). Not scheduleBound-2.lua, which writes nothing either: a replica that has not yet
 * seen an entry written to a giver before its switch would answer a bound too high.
 */
const READ_ONLY_SCRIPTS: ReadonlySet<ScriptName> = new Set(['describeGroup', 'firstAfter', 'readSchedule', 'readScheduleHeads']);

/** Defines every script on the client once; returns the command name of `script`. */
function defineScripts(client: RedisClient, script: ScriptName): string {
  if (!defined.has(client)) {
    for (const [name, lua] of allSources()) {
      client.defineCommand(commandName(name), {
        lua,
        numberOfKeys: keyCount(SCRIPT_FILES[name]),
        readOnly: READ_ONLY_SCRIPTS.has(name),
      });
    }
    defined.add(client);
  }
  return commandName(script);
}

/** Every script's source, includes resolved; read once. */
function allSources(): Map<ScriptName, string> {
  sources ??= new Map((Object.keys(SCRIPT_FILES) as ScriptName[]).map((name) => [name, loadScriptSource(SCRIPT_FILES[name])]));
  return sources;
}

function scriptSource(script: ScriptName): string {
  return allSources().get(script)!;
}
