import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export type Persistence = 'none' | 'aof';

export interface RedisServerOptions {
  /** 'none' (default): nothing on disk. 'aof': append-only file with `appendfsync always`, for restart tests. */
  persistence?: Persistence;
  /** Extra `redis-server` arguments, e.g. ['--maxmemory', '10mb']. */
  args?: string[];
  /**
   * A config file's text, written to the server's directory and passed first (a Sentinel must have
   * a writable config file: it rewrites it as it learns the topology).
   */
  config?: string;
  /** Run as a Sentinel (`--sentinel`); `config` then holds its `sentinel monitor` lines. */
  sentinel?: boolean;
}

/** A server says the first, a Sentinel the second (it logs no "Ready" line). */
const READY = /Ready to accept connections|Sentinel ID is/;
const START_ATTEMPTS = 5;
const START_DEADLINE_MS = 10_000;

/** Every process this module started and has not seen exit; killed if the test process exits first. */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** A port that was free a moment ago; `start` retries on the rare race with another process. */
async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * A private `redis-server` on a free loopback port, for tests, benchmarks and the demo. It never
 * touches a shared instance, and `stop()` stops exactly the process it started (a process exit kills
 * whatever is still running).
 *
 * @example
 * const server = await RedisServer.start({ persistence: 'aof' });
 * const redis = new Redis(server.url);
 * // ...
 * await server.stop();
 */
export class RedisServer {
  private child: ChildProcess | undefined;
  private log = '';

  private constructor(
    readonly port: number,
    readonly dir: string,
    private readonly options: RedisServerOptions,
  ) {}

  static async start(options: RedisServerOptions = {}): Promise<RedisServer> {
    let lastError: unknown;
    for (let attempt = 0; attempt < START_ATTEMPTS; attempt++) {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rsc-redis-'));
      const server = new RedisServer(await freePort(), dir, options);
      try {
        await server.launch();
        return server;
      } catch (error) {
        lastError = error;
        fs.rmSync(dir, { recursive: true, force: true });
      }
    }
    throw lastError;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Whether the process is up (started and not exited). */
  isRunning(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  private launch(): Promise<void> {
    const persistence =
      this.options.persistence === 'aof'
        ? ['--appendonly', 'yes', '--appendfsync', 'always', '--save', '']
        : ['--appendonly', 'no', '--save', ''];
    const config: string[] = [];
    if (this.options.config !== undefined) {
      const file = path.join(this.dir, 'redis.conf');
      if (!fs.existsSync(file)) fs.writeFileSync(file, this.options.config);
      config.push(file);
      if (this.options.sentinel) config.push('--sentinel');
    }
    const child = spawn(
      'redis-server',
      [
        ...config,
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--dir',
        this.dir,
        '--logfile',
        '',
        ...(this.options.sentinel ? [] : persistence),
        ...(this.options.args ?? []),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    this.child = child;
    running.add(child);
    child.once('exit', () => running.delete(child));
    this.log = '';
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => fail(new Error(`redis-server on port ${this.port} not ready after ${START_DEADLINE_MS} ms:\n${this.log}`)),
        START_DEADLINE_MS,
      );
      const onData = (chunk: Buffer) => {
        this.log += chunk.toString();
        if (READY.test(this.log)) {
          clearTimeout(timer);
          resolve();
        }
      };
      const fail = (error: Error) => {
        clearTimeout(timer);
        child.kill('SIGKILL');
        reject(error);
      };
      child.stdout!.on('data', onData);
      child.stderr!.on('data', onData);
      child.once('error', (error) => fail(new Error(`cannot run redis-server (is it installed?): ${error.message}`)));
      child.once('exit', (code) => fail(new Error(`redis-server on port ${this.port} exited with ${code}:\n${this.log}`)));
    });
  }

  /** Stops the process (SIGTERM; SIGKILL after a grace period) and waits until it has exited. */
  async kill(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill(signal);
    const escalate = setTimeout(() => child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(escalate);
  }

  /**
   * Restarts on the same port and directory; with AOF the data survives. `SIGKILL` gives Redis no
   * chance to flush anything: with `appendfsync always`, what it acknowledged is on disk anyway.
   */
  async restart(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    await this.kill(signal);
    await this.launch();
  }

  async stop(): Promise<void> {
    await this.kill('SIGTERM');
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}
