import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import { assertConsumerGroup, assertStreamPrefix, CoordinatorAdmin, CoordinatorError } from '@redis-stream-coordinator/core';
import { type DashboardActionResult, deadLetterAction, listenerAction, resizeAction } from './actions';
import { csrfCookie, csrfRefusal, csrfSetCookie, newCsrfToken } from './csrf';
import {
  type DashboardAccess,
  type DashboardOptions,
  type ResolvedDashboardOptions,
  redisLateAfterMs,
  resolveDashboardOptions,
} from './dashboard-options';
import { GroupWatch } from './group-watch';
import { HandlerRates } from './handler-rates';
import { LiveConnection, type LiveConnectionStats } from './live-connection';
import { DashboardHttpError, readJsonBody, SECURITY_HEADERS, sendError, sendJson } from './http-replies';
import { type Overview, readOverview } from './overview';

export interface DashboardEvents {
  /** A read from Redis failed or stalled (once per distinct problem), or a guard threw. */
  error: [Error];
  /** An action was carried out (after the guard, the CSRF check and read-only said yes). */
  action: [DashboardActionResult];
}

export interface DashboardStats {
  /** Groups read in the background for open pages (each read once per refresh, whatever the browsers). */
  watchedGroups: number;
  /** Open live streams (server-sent events), across groups. */
  liveConnections: number;
  /** Live streams whose client has not read what was sent yet (their snapshots are skipped until it does). */
  liveConnectionsBehind: number;
  /** Bytes held for live clients that have not read them yet, across connections. */
  liveBufferedBytes: number;
  /** Snapshots not sent to a client that was behind (it got the latest once it read). */
  skippedSnapshots: number;
  /** Live streams dropped because their client did not read (over its backlog bound, or stalled). */
  droppedSlowClients: number;
  /** Live streams refused: the group does not exist, or MAX_LIVE_CONNECTIONS / MAX_WATCHED_GROUPS were reached. */
  refusedLiveStreams: number;
  /** The problems of the watched groups right now (empty when every read succeeds). */
  problems: string[];
}

/** Largest dead-letter page the view asks for. */
const DEAD_LETTER_PAGE = 100;
/**
 * Most groups watched at once (SPEC 10.3). Each watch reads its group from Redis every refresh
 * (the event log, then every shard's lag and pending), so the number of watches is the load the
 * dashboard puts on Redis; requests name the groups, so without a cap they could make it any load.
 * A few dozen is more groups than people look at together; idle watches (lingering after their last
 * browser left) make room first.
 */
export const MAX_WATCHED_GROUPS = 50;
/**
 * Most live streams open at once (SPEC 10.3): each holds a socket, a subscription and up to a
 * snapshot plus MAX_LIVE_BACKLOG_BYTES of output, so this bounds the memory browsers can make the
 * dashboard hold. More than a team's worth of open tabs.
 */
export const MAX_LIVE_CONNECTIONS = 200;

type NextFunction = (error?: unknown) => void;
type DashboardRequest = IncomingMessage & { originalUrl?: string; body?: unknown };

const ASSETS: Record<string, string> = { 'app.js': 'text/javascript; charset=utf-8', 'app.css': 'text/css; charset=utf-8' };

/**
 * The dashboard as a plain Node request handler: mount it in any server, and it answers every
 * request under its `path` (the page, its assets, the data, the live stream, the actions) and
 * passes the others to `next` (or answers 404 without one).
 *
 * @example
 * const dashboard = createDashboard({ redis, path: '/rsc' });
 * http.createServer((req, res) => dashboard.handle(req, res)).listen(8080);
 * // Express: app.use(dashboard.middleware());  On shutdown: await dashboard.close();
 */
export class Dashboard extends EventEmitter<DashboardEvents> {
  readonly options: ResolvedDashboardOptions;
  private readonly admin: CoordinatorAdmin;
  private readonly rates = new HandlerRates();
  private readonly watches = new Map<string, GroupWatch>();
  private readonly problems = new Map<string, string>();
  private readonly live = new Map<ServerResponse, LiveConnection>();
  private readonly liveCounters: LiveConnectionStats = { skippedSnapshots: 0, droppedSlowClients: 0 };
  private refusedLiveStreams = 0;
  /** Live streams past the MAX_LIVE_CONNECTIONS check and not yet open (their group being looked up). */
  private admittingLive = 0;
  private readonly page: string;
  private readonly assets = new Map<string, Buffer>();
  private overview: { at: number; value: Promise<Overview> } | undefined;
  private readonly sweeper: NodeJS.Timeout;
  private closed = false;

  constructor(options: DashboardOptions) {
    super();
    this.options = resolveDashboardOptions(options);
    this.admin = new CoordinatorAdmin(this.options.redis, this.options.coordinator);
    const dir = path.join(__dirname, '..', 'assets');
    this.page = readFileSync(path.join(dir, 'index.html'), 'utf8');
    for (const name of Object.keys(ASSETS)) this.assets.set(name, readFileSync(path.join(dir, name)));
    this.sweeper = setInterval(() => this.sweep(), 10_000);
    this.sweeper.unref();
  }

  /** For Express/Connect-style servers: `app.use(dashboard.middleware())`. */
  middleware(): (request: IncomingMessage, response: ServerResponse, next?: NextFunction) => void {
    return (request, response, next) => void this.handle(request, response, next);
  }

  stats(): DashboardStats {
    const connections = [...this.live.values()];
    return {
      watchedGroups: this.watches.size,
      liveConnections: this.live.size,
      liveConnectionsBehind: connections.filter((connection) => connection.isBehind).length,
      liveBufferedBytes: connections.reduce((sum, connection) => sum + connection.bufferedBytes, 0),
      ...this.liveCounters,
      refusedLiveStreams: this.refusedLiveStreams,
      problems: [...this.problems.values()],
    };
  }

  /** Ends every live stream and stops the background reads. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    for (const [response, connection] of this.live) {
      connection.close();
      response.end();
    }
    this.live.clear();
    await Promise.all([...this.watches.values()].map((watch) => watch.stop()));
    this.watches.clear();
  }

  /** Answers a request under the dashboard's path; others go to `next` (404 without one). */
  async handle(request: DashboardRequest, response: ServerResponse, next?: NextFunction): Promise<void> {
    const url = new URL(request.originalUrl ?? request.url ?? '/', 'http://dashboard.invalid');
    const base = this.options.path;
    if (url.pathname !== base && !url.pathname.startsWith(`${base}/`)) {
      if (next) next();
      else sendError(response, 404, 'not found');
      return;
    }
    const route = url.pathname.slice(base.length) || '/';
    const write = request.method === 'POST';
    try {
      if (this.closed) throw new DashboardHttpError(503, 'the dashboard is closed');
      if (request.method !== 'GET' && request.method !== 'HEAD' && !write)
        throw new DashboardHttpError(405, `method ${request.method} is not allowed`);
      await this.checkGuard(request, write ? 'write' : 'read');
      if (write) await this.act(request, response, route);
      else await this.read(request, response, route, url);
    } catch (error) {
      if (error instanceof DashboardHttpError) sendError(response, error.status, error.message);
      // The coordinator's typed refusals (a resize in progress, a group that does not exist) carry a code.
      else if (error instanceof CoordinatorError) sendError(response, 409, (error as Error).message);
      else sendError(response, 502, `Redis: ${(error as Error).message}`);
    }
  }

  private async checkGuard(request: IncomingMessage, access: DashboardAccess): Promise<void> {
    const { guard } = this.options;
    if (!guard) return;
    let allowed: boolean;
    try {
      allowed = await guard(request, access);
    } catch (error) {
      this.emit('error', new Error(`dashboard: the guard threw: ${(error as Error).message}`));
      throw new DashboardHttpError(500, 'the dashboard guard failed');
    }
    if (allowed !== true)
      throw new DashboardHttpError(403, access === 'write' ? 'the guard refused this action' : 'the guard refused access to the dashboard');
  }

  private async read(request: IncomingMessage, response: ServerResponse, route: string, url: URL): Promise<void> {
    if (route === '/' || route === '/index.html') return this.sendPage(request, response);
    const asset = /^\/assets\/([a-z.]+)$/.exec(route);
    if (asset && ASSETS[asset[1]]) {
      response.writeHead(200, { ...SECURITY_HEADERS, 'cache-control': 'no-cache', 'content-type': ASSETS[asset[1]] });
      response.end(this.assets.get(asset[1]));
      return;
    }
    if (route === '/api/overview') return sendJson(response, 200, await this.answered(this.readOverview(), 'the overview'));
    if (route === '/api/config') {
      return sendJson(response, 200, {
        readOnly: this.options.readOnly,
        refreshMs: this.options.refreshMs,
        listeners: this.options.listeners?.list() ?? null,
      });
    }
    const group = /^\/api\/groups\/([^/]+)\/([^/]+)\/(live|dead-letters)$/.exec(route);
    if (group) {
      const [streamPrefix, consumerGroup] = names(group[1], group[2]);
      if (group[3] === 'live') return this.stream(request, response, streamPrefix, consumerGroup);
      const count = Math.min(DEAD_LETTER_PAGE, Math.max(1, Number(url.searchParams.get('count') ?? DEAD_LETTER_PAGE) || DEAD_LETTER_PAGE));
      const deadLetters = await this.answered(this.admin.readDeadLetters(streamPrefix, consumerGroup, { count }), 'the dead letters');
      return sendJson(response, 200, { deadLetters });
    }
    throw new DashboardHttpError(404, `no dashboard page ${JSON.stringify(route)}`);
  }

  private sendPage(request: IncomingMessage, response: ServerResponse): void {
    const existing = csrfCookie(request);
    const token = existing ?? newCsrfToken();
    const headers: Record<string, string> = { ...SECURITY_HEADERS, 'content-type': 'text/html; charset=utf-8' };
    const secure = (request.socket as { encrypted?: boolean }).encrypted === true || request.headers['x-forwarded-proto'] === 'https';
    if (!existing) headers['set-cookie'] = csrfSetCookie(token, this.options.path, secure);
    // Only values of our own making go in: the path is checked against [A-Za-z0-9._~/-], the token is base64url.
    const html = this.page
      .replaceAll('__BASE__', this.options.path)
      .replaceAll('__CSRF__', token)
      .replaceAll('__READONLY__', String(this.options.readOnly));
    response.writeHead(200, headers);
    response.end(html);
  }

  private async act(request: DashboardRequest, response: ServerResponse, route: string): Promise<void> {
    // Read-only first: a read-only dashboard refuses every action the same way, whoever asks.
    if (this.options.readOnly) throw new DashboardHttpError(403, 'the dashboard is read-only (readOnly: true): actions are off');
    const refusal = csrfRefusal(request);
    if (refusal) throw new DashboardHttpError(403, `CSRF check failed: ${refusal}`);
    const body = await readJsonBody(request);
    let action: Promise<DashboardActionResult>;
    const listener = /^\/api\/listeners\/([^/]+)\/(pause|resume)$/.exec(route);
    const letter = /^\/api\/groups\/([^/]+)\/([^/]+)\/dead-letters\/(replay|purge)$/.exec(route);
    const resize = /^\/api\/streams\/([^/]+)\/resize$/.exec(route);
    if (listener) action = Promise.resolve(listenerAction(this.options.listeners, decode(listener[1]), listener[2] as 'pause' | 'resume'));
    else if (letter) action = deadLetterAction(this.admin, ...names(letter[1], letter[2]), letter[3] as 'replay' | 'purge', body);
    else if (resize) action = resizeAction(this.admin, names(resize[1], 'x')[0], body);
    else throw new DashboardHttpError(404, `no dashboard action ${JSON.stringify(route)}`);
    // The 'action' event reports every action that was done, also one finished after its request was answered 504.
    action.then(
      (result) => this.emit('action', result),
      () => undefined,
    );
    sendJson(response, 200, await this.answered(action, 'the action', 'it may still finish: reload to see'));
  }

  /**
   * The live view of a group over server-sent events, from the group's shared watch. Only for a
   * group that exists, and within MAX_LIVE_CONNECTIONS and MAX_WATCHED_GROUPS (SPEC 10.3): a name
   * in a URL must not make the dashboard poll Redis, or hold a connection, for nothing.
   */
  private async stream(request: IncomingMessage, response: ServerResponse, streamPrefix: string, consumerGroup: string): Promise<void> {
    // The slot is taken before the group lookup awaits Redis: requests arriving meanwhile see it
    // taken, so a slow Redis does not let any number of them past the cap. It is given back on
    // every way out: a refusal, a browser gone, or the connection open (then `live` counts it).
    this.reserveLive();
    try {
      await this.admitLive(streamPrefix, consumerGroup);
      // The browser may have gone while the group was looked up: nothing to watch for it then.
      if (request.socket.destroyed) return;
      this.open(request, response, this.watchFor(streamPrefix, consumerGroup));
    } finally {
      this.admittingLive -= 1;
    }
  }

  private open(request: IncomingMessage, response: ServerResponse, watch: GroupWatch): void {
    response.writeHead(200, {
      ...SECURITY_HEADERS,
      'content-type': 'text/event-stream; charset=utf-8',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    response.write(`retry: ${this.options.refreshMs}\n\n`);
    const connection = new LiveConnection(response, this.liveCounters);
    this.live.set(response, connection);
    const unsubscribe = watch.subscribe((event, data) => connection.send(event, data));
    const end = () => {
      connection.close();
      unsubscribe();
      this.live.delete(response);
    };
    request.once('close', end);
    response.once('close', end);
  }

  /** Takes a slot of MAX_LIVE_CONNECTIONS, counting live streams open and those being admitted; 503 when none is left. */
  private reserveLive(): void {
    if (this.live.size + this.admittingLive >= MAX_LIVE_CONNECTIONS) {
      this.refuseLive(503, `the dashboard has ${MAX_LIVE_CONNECTIONS} live streams open already (MAX_LIVE_CONNECTIONS): try again later`);
    }
    this.admittingLive += 1;
  }

  /** Refuses a live stream for a group that does not exist (404). */
  private async admitLive(streamPrefix: string, consumerGroup: string): Promise<void> {
    if (this.watches.has(watchId(streamPrefix, consumerGroup))) return;
    if (!(await this.answered(this.admin.listGroups(streamPrefix), 'the group lookup')).includes(consumerGroup)) {
      this.refuseLive(404, `group "${consumerGroup}" of stream "${streamPrefix}" does not exist`);
    }
  }

  /** The group's watch, made (an idle one making room at MAX_WATCHED_GROUPS) when there is none; 503 when every watch is in use. */
  private watchFor(streamPrefix: string, consumerGroup: string): GroupWatch {
    if (!this.watches.has(watchId(streamPrefix, consumerGroup)) && this.watches.size >= MAX_WATCHED_GROUPS && !this.evictIdleWatch()) {
      this.refuseLive(
        503,
        `the dashboard watches ${MAX_WATCHED_GROUPS} groups already (MAX_WATCHED_GROUPS): close another group's view first`,
      );
    }
    return this.watch(streamPrefix, consumerGroup);
  }

  private refuseLive(status: number, message: string): never {
    this.refusedLiveStreams += 1;
    throw new DashboardHttpError(status, message);
  }

  /** Stops the watch that has been without browsers the longest; false when every watch has some. */
  private evictIdleWatch(): boolean {
    let oldest: [string, GroupWatch] | undefined;
    for (const entry of this.watches) {
      const since = entry[1].idleSinceMs();
      if (since !== undefined && (oldest === undefined || since < (oldest[1].idleSinceMs() ?? Infinity))) oldest = entry;
    }
    if (!oldest) return false;
    this.forget(oldest[0], oldest[1]);
    return true;
  }

  private watch(streamPrefix: string, consumerGroup: string): GroupWatch {
    const id = watchId(streamPrefix, consumerGroup);
    let watch = this.watches.get(id);
    if (!watch) {
      watch = new GroupWatch(
        this.admin,
        streamPrefix,
        consumerGroup,
        this.options.refreshMs,
        this.rates,
        () => this.rates.track(this.options.members()),
        (problem) => {
          if (problem === undefined) {
            this.problems.delete(id);
            return;
          }
          this.problems.set(id, problem);
          this.emit('error', new Error(`dashboard: ${problem}`));
        },
      );
      this.watches.set(id, watch);
    }
    return watch;
  }

  /**
   * `work`'s result, or a 504 when Redis has not answered within redisLateAfterMs (SPEC 10.1): a
   * Redis that does not answer must not hold requests (and their sockets) for ever. The command
   * itself is not withdrawn: ioredis still sends it and takes its answer.
   */
  private answered<T>(work: Promise<T>, what: string, after = 'try again later'): Promise<T> {
    const ms = redisLateAfterMs(this.options.refreshMs);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new DashboardHttpError(504, `Redis has not answered ${what} within ${ms / 1000} s: ${after}`)), ms);
    });
    return Promise.race([work, late]).finally(() => clearTimeout(timer));
  }

  /** One overview read at a time, reused for a while: many browsers polling cost Redis one read. */
  private readOverview(): Promise<Overview> {
    const maxAgeMs = Math.max(5000, this.options.refreshMs * 2);
    if (this.overview && Date.now() - this.overview.at < maxAgeMs) return this.overview.value;
    const value = readOverview(this.admin, (s, g) => this.watches.get(watchId(s, g))?.latest(maxAgeMs));
    this.overview = { at: Date.now(), value };
    // A failed read is not kept: the next request tries again.
    value.catch(() => {
      if (this.overview?.value === value) this.overview = undefined;
    });
    return value;
  }

  private sweep(): void {
    for (const [id, watch] of this.watches) {
      if (watch.isIdle()) this.forget(id, watch);
    }
  }

  private forget(id: string, watch: GroupWatch): void {
    this.watches.delete(id);
    this.problems.delete(id);
    void watch.stop();
  }

  /** Whether `emit('error')` has a listener: without one Node would throw; the dashboard only reports. */
  override emit<K extends keyof DashboardEvents>(event: K, ...args: DashboardEvents[K]): boolean {
    if (event === 'error' && this.listenerCount('error') === 0) return false;
    return super.emit(event, ...(args as never));
  }
}

/** Creates the dashboard handler; see Dashboard. */
export function createDashboard(options: DashboardOptions): Dashboard {
  return new Dashboard(options);
}

function watchId(streamPrefix: string, consumerGroup: string): string {
  return `${streamPrefix}\u0000${consumerGroup}`;
}

function decode(segment: string): string {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw new DashboardHttpError(400, `malformed path segment ${JSON.stringify(segment)}`);
  }
}

/** The stream and group named in a path, checked as the coordinator checks them. */
function names(stream: string, group: string): [string, string] {
  try {
    return [assertStreamPrefix(decode(stream)), assertConsumerGroup(decode(group))];
  } catch (error) {
    if (error instanceof DashboardHttpError) throw error;
    throw new DashboardHttpError(400, (error as Error).message);
  }
}
