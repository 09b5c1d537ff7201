// Captures the terminal sessions of docs/operations.md from a real run: a private redis-server, a
// stream "orders" with a group "billing" of two members, and every rsc command against them.
// Usage: npm run build --workspace packages/core --workspace packages/cli && node scripts/capture-operations-session.js > /tmp/session.md
const { execFile, spawn } = require('node:child_process');
const path = require('node:path');
const { Redis } = require('ioredis');
const { CoordinatedMember, CoordinatorAdmin, StreamProducer } = require('../packages/core/dist');
const { RedisServer } = require('../packages/core/dist/testing');

const BIN = path.join(__dirname, '../packages/cli/dist/main.js');

async function main() {
  const server = await RedisServer.start();
  const env = { ...process.env, REDIS_URL: server.url };
  const out = [];
  // Asynchronous, so that the members in this process keep running while rsc works.
  const run = async (args, note) => {
    if (process.env.DEBUG_SESSION) console.error('run', args.join(' '));
    const { code, stdout } = await new Promise((resolve) =>
      execFile(process.execPath, [BIN, ...args], { env, encoding: 'utf8' }, (error, stdout, stderr) =>
        resolve({ code: error ? error.code : 0, stdout: `${stdout}${stderr}` }),
      ),
    );
    const shown = args.map((a) => (/[\s{}"]/.test(a) ? `'${a}'` : a)).join(' ');
    out.push(
      `${note ? `${note}\n\n` : ''}\`\`\`console\n$ rsc ${shown}\n${stdout.trimEnd()}${code ? `\n$ echo $?\n${code}` : ''}\n\`\`\`\n`,
    );
  };
  const clients = [];
  const client = () => {
    const c = new Redis(server.url);
    clients.push(c);
    return c;
  };
  let fixed = false;
  const members = ['billing-a', 'billing-b'].map((memberName) => {
    const member = new CoordinatedMember(client(), {
      streamPrefix: 'orders',
      consumerGroup: 'billing',
      memberName,
      shardCount: 4,
      maxAttempts: 2,
      retryBackoffMs: 10,
      coordinator: { heartbeatIntervalMs: 500 },
      handler: (message) => {
        if (message.payload.amount < 0 && !fixed) throw new RangeError(`amount ${message.payload.amount} is negative`);
      },
    });
    member.on('error', () => undefined);
    return member;
  });
  const admin = new CoordinatorAdmin(client());
  const waitFor = async (what, probe) => {
    for (const deadline = Date.now() + 20_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 50)))
      if (await probe()) return;
    throw new Error(`timed out waiting for ${what}`);
  };
  for (const member of members) await member.start();
  await waitFor('the members to share the shards', () => members.every((m) => m.ownedShards().length === 2));
  const producer = new StreamProducer(client(), { streamPrefix: 'orders' });
  await producer.sendBatch(
    Array.from({ length: 40 }, (_, i) => ({ key: `customer-${i % 7}`, payload: { order: i, amount: i % 13 === 5 ? -i : i * 10 } })),
  );
  await waitFor('the backlog handled', async () => (await admin.describeGroup('orders', 'billing')).shards.every((s) => s.backlog === 0));

  await run(['streams']);
  await run(['groups', 'orders']);
  await run(['describe', 'orders', 'billing']);
  await run(['events', 'orders', 'billing', '--count', '6']);
  await run(['dead-letters', 'orders', 'billing', 'list']);
  const [first] = await admin.readDeadLetters('orders', 'billing');
  await run(['dead-letters', 'orders', 'billing', 'show', '--id', first.ref]);
  await run(['dead-letters', 'orders', 'billing', 'replay'], 'Replay and purge need a selection:');
  fixed = true; // the handler's bug is fixed: replays now succeed
  await run(['dead-letters', 'orders', 'billing', 'replay', '--id', first.ref]);
  await run(['dead-letters', 'orders', 'billing', 'replay', '--id', first.ref], 'Running it again changes nothing:');
  await run(['dead-letters', 'orders', 'billing', 'replay', '--error', 'RangeError']);
  await waitFor('the replays handled', async () => (await admin.describeGroup('orders', 'billing')).shards.every((s) => s.backlog === 0));
  fixed = false;
  await producer.sendBatch([{ key: 'customer-2', payload: { order: 100, amount: -2 } }]);
  await waitFor('one more dead letter', async () => (await admin.readDeadLetters('orders', 'billing')).length === 1);
  await run(['dead-letters', 'orders', 'billing', 'purge', '--all']);
  await waitFor('the backlog handled', async () => (await admin.describeGroup('orders', 'billing')).shards.every((s) => s.backlog === 0));
  await run(['trim', 'orders', '--dry-run']);
  await run(['trim', 'orders']);
  await producer.sendBatch(Array.from({ length: 12 }, (_, i) => ({ key: `customer-${i}`, payload: { order: 200 + i, amount: 1 } })));
  await run(['resize', 'orders', '6', '--grace-ms', '500']);
  await run(['reset-offsets', 'orders', 'billing', '--to-earliest']);
  await run(['reset-offsets', 'orders', 'billing', '--to-datetime', '2026-01-01T00:00:00Z', '--shard', '2', '--dry-run', '--force']);
  // events --follow while the members leave, stopped with Ctrl-C (SIGINT) once both have left.
  const follow = spawn(process.execPath, [BIN, 'events', 'orders', 'billing', '--follow', '--count', '1'], { env });
  let followed = '';
  follow.stdout.on('data', (chunk) => (followed += chunk));
  await waitFor('the follow to start', () => followed.length > 0);
  for (const member of members) await member.stop();
  await waitFor('both leaves followed', () => followed.split('MEMBER_LEFT').length > 2);
  follow.kill('SIGINT');
  await new Promise((resolve) => follow.on('exit', resolve));
  out.push(`\`\`\`console\n$ rsc events orders billing --follow --count 1\n${followed.trimEnd()}\n^C\n\`\`\`\n`);
  await run(['reset-offsets', 'orders', 'billing', '--to-latest'], 'With the members stopped:');
  await run(['--json', 'trim', 'orders', '--dry-run']);
  await run(
    ['resize', 'orders', 'many'],
    'Errors name what was wrong; exit code 2 for a wrong command line, 1 for a failed or refused operation:',
  );
  await run(['describe', 'orders', 'shipping']);
  await run(['--url', 'redis://127.0.0.1:1', 'streams']);
  process.stdout.write(out.join('\n'));
  for (const c of clients) c.disconnect();
  await server.stop();
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
