import { type ChildProcess, spawn } from 'node:child_process';
import net from 'node:net';
import { pollUntil } from './poll';

/** A demo process (`node apps/demo/dist/main.js`, or `npm run demo` as the README runs it) that answers HTTP. */
export interface DemoProcess {
  /** The process the test started: node itself, or npm. */
  child: ChildProcess;
  /** Everything it printed so far, stdout and stderr. */
  output: () => string;
  httpPort: number;
  /** The pid of the Node process that runs the demo (Nest prints it on every log line). */
  nodePid: number;
  /** Its exit code (null when a signal ended it). */
  exited: Promise<number | null>;
}

/**
 * Starts `command args` in a process group of its own (as a terminal or a process manager starts
 * it), pushes it onto `running` (for `killGroups`), and resolves once it listens and GET /health
 * answers 200 (its members joined). `PORT=0` in `env` makes the demo pick a free port.
 */
export async function startDemoProcess(
  command: string,
  args: string[],
  options: { cwd: string; env: NodeJS.ProcessEnv; running: ChildProcess[]; timeoutMs?: number },
): Promise<DemoProcess> {
  const timeoutMs = options.timeoutMs ?? 20_000;
  const child = spawn(command, args, { cwd: options.cwd, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: options.env });
  options.running.push(child);
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const started = await pollUntil(
    'the demo listening',
    async () => {
      if (child.exitCode !== null) throw new Error(`the demo exited with ${child.exitCode}:\n${output}`);
      const http = /listening on http:\/\/localhost:(\d+)/.exec(output);
      const pid = /\[Nest\] (\d+) /.exec(output);
      return http && pid ? { httpPort: Number(http[1]), nodePid: Number(pid[1]) } : undefined;
    },
    { timeoutMs, intervalMs: 50 },
  );
  await pollUntil(
    'members joined',
    async () => (await fetch(`http://127.0.0.1:${started.httpPort}/health`).catch(() => undefined))?.status === 200,
    { timeoutMs: 20_000, intervalMs: 50 },
  );
  return { child, output: () => output, exited, ...started };
}

/** Kills the whole process group of every child still running (what a failed test left, a redis-server included). */
export function killGroups(running: ChildProcess[]): void {
  for (const child of running.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // The group is gone already.
      }
    }
  }
}

/** The exit code, or a failure naming what the demo printed if it has not exited in time. */
export async function exitCodeOf(demo: Pick<DemoProcess, 'exited' | 'output'>, timeoutMs = 30_000): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`the demo was still running ${timeoutMs} ms later:\n${demo.output().slice(-2000)}`)),
      timeoutMs,
    );
  });
  try {
    return await Promise.race([demo.exited, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Whether nothing listens on this loopback port any more. */
export const refusesConnections = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });

/** Whether a process with this pid is still there. */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
