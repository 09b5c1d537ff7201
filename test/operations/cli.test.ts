import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { CoordinatorAdmin, KeyBuilder, StreamProducer, type StreamMessage, msgpackCodec } from '@redis-stream-coordinator/core';
import type { KeyedPayload } from '../support/handler-recorder';
import { memberFactory } from '../support/member-factory';
import { RSC_BIN, rscInProcess, rscProcess } from '../support/rsc';
import { pollUntil } from '../support/poll';
import { uniqueName, useRedisServer } from '../support/vitest-redis';

// `rsc` against a private redis-server: most commands run in this process (runRsc, what the binary
// runs, writing to buffers here: a node process each cost most of this file's time), and the real
// binary (docs/operations.md, The `rsc` command: node on the built file) where the process itself is
// what is checked: exit codes, Ctrl-C, the environment.
const redis = useRedisServer();
const aMember = memberFactory(redis, { retryBackoffMs: 1 });
const keys = new KeyBuilder();
const admin = () => new CoordinatorAdmin(redis.client());

beforeAll(() => {
  if (!fs.existsSync(RSC_BIN))
    throw new Error(`${RSC_BIN} is missing: build it with npm run build --workspace packages/cli (npm test does)`);
});

/** Runs `rsc --url <the private server> ...args` to completion, in this process. */
function rsc(...args: string[]) {
  return rscInProcess(['--url', redis.server.url, ...args]);
}

/** Starts `rsc` for a command that runs until stopped (--watch, --follow), collecting its output. */
function rscRunning(...args: string[]) {
  const child: ChildProcess = spawn(process.execPath, [RSC_BIN, '--url', redis.server.url, ...args]);
  const out = { stdout: '', stderr: '' };
  child.stdout!.on('data', (chunk: Buffer) => (out.stdout += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (out.stderr += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { out, exited, stop: () => child.kill('SIGINT') };
}

/** A stream with a group "group" whose member handles entries, except `poison` ones (dead-lettered). */
async function aGroup(shardCount: number, memberName = 'cli-a') {
  const streamPrefix = uniqueName('cli');
  const member = aMember({
    streamPrefix,
    shardCount,
    memberName,
    maxAttempts: 1,
    handler: (message: StreamMessage<KeyedPayload & { poison?: boolean }>) => {
      if (message.payload.poison) throw new Error(`poison ${message.payload.seq}`);
    },
  });
  await member.start();
  await pollUntil('the member to own every shard', async () => member.ownedShards().length === shardCount);
  return { streamPrefix, member, producer: new StreamProducer(redis.client(), { streamPrefix }) };
}

describe('rsc streams, groups, describe', () => {
  it('lists streams and groups, and describes a group for people and for machines', async () => {
    const { streamPrefix, member } = await aGroup(2);
    const streams = await rsc('streams');
    expect(streams.code).toBe(0);
    expect(streams.stdout).toMatch(/^STREAM\s+SHARDS\s+SPAN\s+METADATA VERSION\s+GROUPS\s+UPDATED$/m);
    expect(streams.stdout).toMatch(new RegExp(`^${streamPrefix}\\s+2\\s+2\\s+1\\s+group\\s`, 'm'));
    const json = JSON.parse((await rsc('--json', 'streams')).stdout) as { streamPrefix: string; groups: string[] }[];
    expect(json.find((s) => s.streamPrefix === streamPrefix)).toMatchObject({ shardCount: 2, groups: ['group'] });

    const groups = await rsc('groups', streamPrefix);
    expect(groups.stdout).toMatch(/^group\s+STABLE\s+\d+\s+\d+\s+1\s+0\s+no$/m);

    const described = await rsc('describe', streamPrefix, 'group');
    expect(described.code).toBe(0);
    expect(described.stdout).toMatch(new RegExp(`^group group of stream ${streamPrefix}: STABLE`, 'm'));
    expect(described.stdout).toMatch(/^0\s+readable\s+OWNED\s+cli-a\s+\d+\s+0\s+0\s+0\s+0\s+0\s+-\s+/m);
    expect(described.stdout).toMatch(
      new RegExp(`^${member.memberId}\\s+cli-a\\s+ACTIVE\\s+\\d+\\s+\\S+\\s+\\S+ ago\\s+0-1\\s+-\\s+1\\s+-$`, 'm'),
    );
    expect(described.stdout).not.toContain('awaited static members');
    const view = JSON.parse((await rsc('describe', streamPrefix, 'group', '--json')).stdout);
    expect(view.shards.map((s: { owner: string }) => s.owner)).toEqual([member.memberId, member.memberId]);
    expect(view.members[0]).toMatchObject({ memberName: 'cli-a', state: 'ACTIVE' });
    expect(view.members[0].leaseLeftMs).toBeGreaterThan(0);
  });

  it('describe shows static members by instance id, and a departed one whose shards wait for it, with when the wait ends', async () => {
    const streamPrefix = uniqueName('cli-static');
    const statics = ['pod-a', 'pod-b'].map((pod) =>
      aMember({
        streamPrefix,
        shardCount: 4,
        memberInstanceId: `billing-${pod}`,
        memberName: pod,
        sessionTimeoutMs: 30_000,
        handler: () => undefined,
      }),
    );
    await Promise.all(statics.map((m) => m.start()));
    await pollUntil('two shards each', async () => statics.every((m) => m.ownedShards().length === 2));
    const awayShards = statics[0].ownedShards();
    await statics[0].stop(); // departs: its membership and shards wait for its next instance
    const described = await rsc('describe', streamPrefix, 'group');
    expect(described.code).toBe(0);
    expect(described.stdout).toMatch(/^billing-pod-a\s+pod-a\s+AWAY\s+\d+\s+\S+\s+\S+ ago\s+\S+\s+-\s+1\s+billing-pod-a$/m);
    expect(described.stdout).toMatch(/^billing-pod-b\s+pod-b\s+ACTIVE\s+.*\s+billing-pod-b$/m);
    const view = JSON.parse((await rsc('describe', streamPrefix, 'group', '--json')).stdout);
    const away = view.members.find((m: { memberId: string }) => m.memberId === 'billing-pod-a');
    expect(away).toMatchObject({ state: 'ACTIVE', memberInstanceId: 'billing-pod-a', awaitedUntil: away.memberLeaseExpiresAt });
    expect(away.awaitedLeftMs).toBeGreaterThan(20_000);
    expect(Date.parse(away.departedAt)).toBeLessThanOrEqual(Date.parse(view.at));
    expect(view.members.find((m: { memberId: string }) => m.memberId === 'billing-pod-b')).toMatchObject({
      memberInstanceId: 'billing-pod-b',
      departedAt: null,
      awaitedUntil: null,
    });
    const section = described.stdout.split('awaited static members')[1];
    expect(section).toBeDefined();
    const shards =
      awayShards.length === 2 && awayShards[1] === awayShards[0] + 1 ? `${awayShards[0]}-${awayShards[1]}` : awayShards.join(',');
    expect(section).toMatch(new RegExp(`^billing-pod-a\\s+${away.departedAt}\\s+${away.awaitedUntil}\\s+\\S+s\\s+${shards}$`, 'm'));
  });

  it('describe --watch redraws until Ctrl-C and then exits 0', async () => {
    const { streamPrefix } = await aGroup(1);
    const watch = rscRunning('describe', streamPrefix, 'group', '--watch');
    await pollUntil('two frames', async () => watch.out.stdout.split('Ctrl-C to stop').length > 2, { timeoutMs: 10_000 });
    watch.stop();
    expect(await watch.exited).toBe(0);
    expect(watch.out.stdout).toContain('\x1b[2J');
  });

  it('names what is wrong, with exit 1 for a failed operation and 2 for a wrong command line', async () => {
    const missing = await rsc('describe', 'no-such-stream', 'group');
    expect(missing).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/rsc: error: stream "no-such-stream" does not exist \(it has no metadata\): .*`rsc streams` lists/),
    });
    // What an operator can change at a command line: the name and --key-prefix, not a TypeScript API.
    const noGroups = await rsc('groups', 'no-such-stream');
    expect(noGroups).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(
        /rsc: error: stream "no-such-stream" does not exist \(it has no metadata\): check the name and --key-prefix \(`rsc streams` lists the streams under key prefix "rsc"\)\n$/,
      ),
    });
    expect(noGroups.stderr).not.toMatch(/CoordinatorAdmin|shardCount/);
    const badName = await rsc('describe', 'bad{name}', 'group');
    expect(badName).toMatchObject({ code: 2, stderr: expect.stringMatching(/streamPrefix "bad\{name\}" is invalid/) });
    const badCount = await rsc('resize', 'x', 'zero');
    expect(badCount).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/value 'zero' is invalid for argument 'n'. expected an integer from 1 to 8192/),
    });
    // The binary's exit codes are the process's own: a wrong command line (2), a failed operation (1).
    const unknown = await rscProcess(['--url', redis.server.url, 'nonsense']);
    expect(unknown).toMatchObject({ code: 2, stderr: expect.stringMatching(/unknown command 'nonsense'/) });
    const down = await rscProcess(['--url', 'redis://127.0.0.1:1', 'streams']);
    expect(down).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/cannot connect to Redis at redis:\/\/127\.0\.0\.1:1: .*ECONNREFUSED/),
    });
  });

  it('passes an ACL user and password to Redis, and hides the password in errors', async () => {
    await redis.client().call('ACL', 'SETUSER', 'rsc-ops', 'on', '>s3cret', '~*', '&*', '+@all');
    const ok = await rsc('--user', 'rsc-ops', '--password', 's3cret', 'streams');
    expect(ok.code).toBe(0);
    const wrong = await rscInProcess(['--url', redis.server.url.replace('redis://', 'redis://rsc-ops:wrong@'), 'streams']);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toMatch(/rsc-ops:\*\*\*@.*WRONGPASS/);
    expect(wrong.stderr).not.toContain('wrong@');
  });
});

describe('passwords are never printed', () => {
  it('a connection error hides the password of --url and of every --cluster URL, whatever it holds (@, :, /)', async () => {
    const single = await rscInProcess(['--url', 'redis://:S3cr@tPassw0rd@127.0.0.1:1', 'streams']);
    expect(single.code).toBe(1);
    expect(single.stderr).toContain('cannot connect to Redis at redis://:***@127.0.0.1:1');
    const cluster = await rscInProcess(['--cluster', 'redis://:F1rst@pw@127.0.0.1:1,redis://ops:Sec/ond:pw@127.0.0.1:2', 'streams']);
    expect(cluster.code).toBe(1);
    expect(cluster.stderr).toContain('redis://:***@127.0.0.1:1,redis://ops:***@127.0.0.1:2');
    const usage = await rscInProcess(['--url', ':S3cr@tPassw0rd@127.0.0.1:1', 'streams']);
    expect(usage.code).toBe(2);
    const badNode = await rscInProcess(['--cluster', 'ops:S3cr@tPassw0rd@127.0.0.1', 'streams']);
    expect(badNode.code).toBe(2);
    // Commander quotes a mistyped option whole, in the middle of its message.
    const typo = await rscInProcess(['--urll=:S3cr@tPassw0rd@127.0.0.1:1', 'streams']);
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('***@127.0.0.1:1');
    for (const run of [single, cluster, usage, badNode, typo]) {
      expect(run.stderr).not.toMatch(/S3cr|tPassw0rd|F1rst|Sec\/ond|ond:pw/);
    }
  });
});

describe('empty environment variables count as not set', () => {
  it('an exported but empty REDIS_CLUSTER_NODES, REDIS_PASSWORD or REDIS_USERNAME does not change what --url does', async () => {
    // The binary, so that the variables are the process's own environment.
    const run = await rscProcess(['--url', redis.server.url, 'streams'], {
      REDIS_CLUSTER_NODES: '',
      REDIS_PASSWORD: '',
      REDIS_USERNAME: ' ',
    });
    expect(run).toMatchObject({ code: 0, stderr: '' });
  });
});

describe('every command refuses a stream or group that does not exist the same way', () => {
  // About twenty commands, each a node process of its own (the exit codes are what is checked): on a
  // machine running two other test files beside this one that took close to 30 s.
  it('exit 1 naming the stream, or the group, for every command that takes one; a dead-letter destination with letters is found', async () => {
    const { streamPrefix } = await aGroup(1);
    const noGroup = new RegExp(`rsc: error: group "nope" of stream "${streamPrefix}" does not exist`);
    const groupCommands = [
      ['describe', streamPrefix, 'nope'],
      ['events', streamPrefix, 'nope'],
      ['reset-offsets', streamPrefix, 'nope', '--to-earliest', '--dry-run'],
      ['dead-letters', streamPrefix, 'nope', 'list'],
      ['dead-letters', streamPrefix, 'nope', 'show', '--id', '0/1-0'],
      ['dead-letters', streamPrefix, 'nope', 'replay', '--all'],
      ['dead-letters', streamPrefix, 'nope', 'purge', '--all'],
    ];
    for (const args of groupCommands) {
      const run = await rsc(...args);
      expect({ args, code: run.code, stderr: run.stderr }).toMatchObject({ code: 1, stderr: expect.stringMatching(noGroup) });
    }
    const noStream = /rsc: error: stream "no-such-stream" does not exist/;
    const streamCommands = [
      ['groups', 'no-such-stream'],
      ['trim', 'no-such-stream', '--dry-run'],
      ['resize', 'no-such-stream', '2', '--no-wait'],
      ['events', 'no-such-stream', 'group'],
      ['dead-letters', 'no-such-stream', 'group', 'list'],
      ['reset-offsets', 'no-such-stream', 'group', '--to-earliest', '--dry-run'],
    ];
    for (const args of streamCommands) {
      const run = await rsc(...args);
      expect({ args, code: run.code, stderr: run.stderr }).toMatchObject({ code: 1, stderr: expect.stringMatching(noStream) });
    }
    expect(await admin().describeStream('no-such-stream')).toBeNull(); // nothing was created on the way
    // A destination its members name (deadLetter.stream) is not a group, but its letters are there to list.
    await redis
      .client()
      .xadd(keys.shardDeadLetterStream(streamPrefix, 0, 'audit'), '*', 'entryId', '1-0', 'error', 'boom', 'attempts', '3');
    const audit = await rsc('dead-letters', streamPrefix, 'audit', 'list');
    expect(audit).toMatchObject({ code: 0, stdout: expect.stringContaining('boom') });
  }, 90_000);
});

describe('rsc events', () => {
  it('prints the event log, and with --follow the new events as they happen', async () => {
    const { streamPrefix } = await aGroup(2);
    const events = await rsc('events', streamPrefix, 'group');
    expect(events.stdout).toMatch(/^\S+Z\s+MEMBER_JOINED\s+/m);
    const follow = rscRunning('events', streamPrefix, 'group', '--follow', '--json');
    await pollUntil('the log so far', async () => follow.out.stdout.includes('MEMBER_JOINED'));
    const second = aMember({ streamPrefix, memberName: 'cli-b', handler: () => undefined });
    await second.start();
    await pollUntil("the second member's join", async () =>
      follow.out.stdout
        .split('\n')
        .filter(Boolean)
        .some((line) => JSON.parse(line).type === 'MEMBER_JOINED' && JSON.parse(line).memberId === second.memberId),
    );
    follow.stop();
    expect(await follow.exited).toBe(0);
  });
});

describe('rsc resize', () => {
  it('resizes and follows the cutover until every group completes it', async () => {
    const { streamPrefix, producer } = await aGroup(2);
    await producer.sendBatch(Array.from({ length: 20 }, (_, seq) => ({ key: `k${seq}`, payload: { seq } })));
    const resize = await rsc('resize', streamPrefix, '3', '--grace-ms', '200', '--timeout', '15');
    expect(resize.stderr).toBe('');
    expect(resize.code).toBe(0);
    expect(resize.stdout).toMatch(new RegExp(`^stream ${streamPrefix}: 2 -> 3 shards \\(metadataVersion 2, ordered\\)$`, 'm'));
    expect(resize.stdout).toMatch(/^group group: (cutover complete|reads every shard)$/m);
    expect((await admin().cutoverStatus(streamPrefix))[0].cutover).toBeNull();
    const again = await rsc('--json', 'resize', streamPrefix, '3');
    expect(JSON.parse(again.stdout)).toMatchObject({ changed: false, shardCount: 3, cutoverComplete: true });
  });
});

describe('rsc reset-offsets', () => {
  it('is refused while the group has live members unless --force; --dry-run changes nothing; then moves every shard', async () => {
    const { streamPrefix, member, producer } = await aGroup(2, 'resetter');
    const written = await producer.sendBatch(Array.from({ length: 6 }, (_, seq) => ({ shardIndex: seq % 2, payload: { seq } })));
    await pollUntil('everything handled', async () =>
      (await admin().describeGroup(streamPrefix, 'group')).shards.every((s) => s.backlog === 0),
    );

    const refused = await rsc('reset-offsets', streamPrefix, 'group', '--to-earliest');
    expect(refused).toMatchObject({
      code: 1,
      stderr: expect.stringMatching(/has 1 live member\(s\) \(resetter\): stop them first, or force/),
    });
    const dry = await rsc('reset-offsets', streamPrefix, 'group', '--to-earliest', '--dry-run', '--force');
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(/dry run, nothing changed/);
    expect(dry.stdout).toMatch(new RegExp(`^0\\s+${written[4].id}\\s+0-0\\s+0$`, 'm'));
    const lastDelivered = async (shard: number) =>
      ((await redis.client().xinfo('GROUPS', keys.shardStream(streamPrefix, shard))) as string[][])[0][7];
    expect(await lastDelivered(0)).toBe(written[4].id);

    await member.stop();
    const noTarget = await rsc('reset-offsets', streamPrefix, 'group');
    expect(noTarget).toMatchObject({
      code: 2,
      stderr: expect.stringMatching(/needs exactly one of --to-earliest, --to-latest, --to-datetime T, --to-id ID \(got 0\)/),
    });
    const toTime = await rsc(
      '--json',
      'reset-offsets',
      streamPrefix,
      'group',
      '--to-datetime',
      written[3].id.split('-')[0],
      '--shard',
      '1',
    );
    expect(toTime.code).toBe(0);
    const [shard1] = JSON.parse(toTime.stdout).shards;
    expect(shard1.shardIndex).toBe(1);
    // Entries written at or after that time are read next: the first of them follows the new position.
    const time = Number(written[3].id.split('-')[0]);
    const all = await redis.client().xrange(keys.shardStream(streamPrefix, 1), '-', '+');
    const firstAtOrAfter = all.find(([id]) => Number(id.split('-')[0]) >= time)![0];
    const next = await redis.client().xrange(keys.shardStream(streamPrefix, 1), `(${shard1.to}`, '+', 'COUNT', 1);
    expect(next[0][0]).toBe(firstAtOrAfter);
    expect((await rsc('reset-offsets', streamPrefix, 'group', '--to-latest')).code).toBe(0);
    expect(await lastDelivered(0)).toBe(written[4].id);
    expect((await rsc('reset-offsets', streamPrefix, 'group', '--to-id', written[0].id, '--shard', '0')).code).toBe(0);
    expect(await lastDelivered(0)).toBe(written[0].id);
  });
});

describe('rsc dead-letters and trim', () => {
  it('lists, shows (with the stack), replays and purges dead letters; refuses an action without a selection', async () => {
    const { streamPrefix, producer } = await aGroup(2);
    await producer.sendBatch([
      { key: 'alpha', payload: { seq: 1, poison: true } },
      { key: 'beta', payload: { seq: 2, poison: true } },
      { key: 'gamma', payload: { seq: 3, poison: true } },
    ]);
    await pollUntil('three dead letters', async () => (await admin().readDeadLetters(streamPrefix, 'group')).length === 3);
    const list = await rsc('dead-letters', streamPrefix, 'group', 'list');
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^REF\s+DEAD-LETTERED\s+SHARD\s+ENTRY ID\s+KEY\s+ATTEMPTS\s+ERROR$/m);
    expect(list.stdout).toMatch(/^\d\/\d+-\d+\s+\S+Z\s+\d\s+\d+-\d+\s+beta\s+1\s+Error: poison 2$/m);
    const letters = JSON.parse((await rsc('--json', 'dead-letters', streamPrefix, 'group', 'list', '--key', 'alpha')).stdout);
    expect(letters).toHaveLength(1);
    const show = await rsc('dead-letters', streamPrefix, 'group', 'show', '--id', letters[0].ref);
    expect(show.stdout).toMatch(/^payload\s+\{"seq":1,"poison":true\}$/m);
    // The failure's stack, after the table: its first line is the error, the next a frame.
    expect(show.stdout).toMatch(/^stack:\nError: poison 1\n\s+at /m);

    const unselected = await rsc('dead-letters', streamPrefix, 'group', 'replay');
    expect(unselected).toMatchObject({ code: 2, stderr: expect.stringMatching(/replay needs --id REF, --all, or a filter/) });
    const replay = await rsc('dead-letters', streamPrefix, 'group', 'replay', '--id', letters[0].ref);
    expect(replay.code).toBe(0);
    expect(replay.stdout).toMatch(/replayed 1, found-earlier-replay 0, gone 0, not-replayable 0/);
    // The member dead-letters the replay again (still poison): a new dead letter, with the same key.
    await pollUntil(
      'the replay dead-lettered again',
      async () => (await admin().readDeadLetters(streamPrefix, 'group', { key: 'alpha' })).length === 1,
    );
    const twice = await rsc('dead-letters', streamPrefix, 'group', 'replay', '--id', letters[0].ref);
    expect(twice.stdout).toMatch(/replayed 0, found-earlier-replay 0, gone 1/);

    const purge = await rsc('dead-letters', streamPrefix, 'group', 'purge', '--error', 'poison 2');
    expect(purge.stdout).toMatch(/^purged 1 dead letter\(s\)$/m);
    expect((await rsc('dead-letters', streamPrefix, 'group', 'purge', '--all')).stdout).toMatch(/^purged 2 dead letter\(s\)$/m);
    expect((await rsc('dead-letters', streamPrefix, 'group', 'list')).stdout).toMatch(/^no dead letters$/m);
    const unknownRef = await rsc('dead-letters', streamPrefix, 'group', 'show', '--id', 'x');
    expect(unknownRef).toMatchObject({ code: 2, stderr: expect.stringMatching(/dead letter ref "x" is invalid/) });
  });

  it('shows a msgpack dead letter decoded, with the bytes inside it as base64', async () => {
    const { streamPrefix } = await aGroup(1);
    const bytes = Buffer.from([0xff, 0x00, 0xfe]);
    await new StreamProducer(redis.client(), { streamPrefix, codec: msgpackCodec }).send({
      key: 'bin',
      payload: { seq: 1, poison: true, bytes },
    });
    const [letter] = await pollUntil('the dead letter', async () => {
      const letters = await admin().readDeadLetters(streamPrefix, 'group');
      return letters.length > 0 && letters;
    });
    const show = await rsc('dead-letters', streamPrefix, 'group', 'show', '--id', letter.ref);
    expect(show.stdout).toMatch(/^codec\s+msgpack$/m);
    expect(show.stdout).toMatch(/^payload\s+\{"seq":1,"poison":true,"bytes":\{"base64":"\/wD\+"\}\}$/m);
    const json = JSON.parse((await rsc('--json', 'dead-letters', streamPrefix, 'group', 'show', '--id', letter.ref)).stdout);
    expect(json).toMatchObject({ codec: 'msgpack', payloadBase64: expect.any(String) });
  });

  it('trims what every group has acknowledged, with a dry run first', async () => {
    const { streamPrefix, producer } = await aGroup(2);
    await producer.sendBatch(Array.from({ length: 10 }, (_, seq) => ({ shardIndex: seq % 2, payload: { seq } })));
    await pollUntil('everything handled', async () =>
      (await admin().describeGroup(streamPrefix, 'group')).shards.every((s) => s.backlog === 0),
    );
    const dry = await rsc('trim', streamPrefix, '--dry-run');
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(new RegExp(`^stream ${streamPrefix}: dry run, would trim 10 entries \\(groups: group\\)$`, 'm'));
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, 0))).toBe(5);
    const trim = JSON.parse((await rsc('--json', 'trim', streamPrefix)).stdout);
    expect(trim).toMatchObject({
      trimmed: 10,
      shards: [
        { shardIndex: 0, trimmed: 5 },
        { shardIndex: 1, trimmed: 5 },
      ],
    });
    expect(await redis.client().xlen(keys.shardStream(streamPrefix, 0))).toBe(0);
  });
});
