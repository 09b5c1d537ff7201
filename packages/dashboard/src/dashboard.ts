import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';
import { assertConsumerGroup, assertStreamPrefix, CoordinatorAdmin, CoordinatorError } from '@redis-stream-coordinator/core';
import { type DashboardActionResult, deadLetterAction, listenerAction, resizeAction } from './actions';
import { csrfCookie, csrfRefusal, csrfSetCookie, newCsrfToken } from './csrf';
import { type DashboardAccess, type DashboardOptions, type ResolvedDashboardOptions, resolveDashboardOptions } from './dashboard-options';
import { GroupWatch } from './group-watch';
import { HandlerRates } from './handler-rates';
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
  /** The problems of the watched groups right now (empty when every read succeeds). */
  problems: string[];
}

/** Largest dead-letter page the view asks for. */
const DEAD_LETTER_PAGE = 100;
/** Server-sent comment lines keep proxies from closing an idle live stream. */
const KEEPALIVE_MS = 15_000;

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
  private readonly live = new Set<ServerResponse>();
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
    return { watchedGroups: this.watches.size, liveConnections: this.live.size, problems: [...this.problems.values()] };
  }

  /** Ends every live stream and stops the background reads. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.sweeper);
    for (const response of this.live) response.end();
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
    if (route === '/api/overview') return sendJson(response, 200, await this.readOverview());
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
      return sendJson(response, 200, { deadLetters: await this.admin.readDeadLetters(streamPrefix, consumerGroup, { count }) });
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
    let result: DashboardActionResult;
    const listener = /^\/api\/listeners\/([^/]+)\/(pause|resume)$/.exec(route);
    const letter = /^\/api\/groups\/([^/]+)\/([^/]+)\/dead-letters\/(replay|purge)$/.exec(route);
    const resize = /^\/api\/streams\/([^/]+)\/resize$/.exec(route);
    if (listener) result = listenerAction(this.options.listeners, decode(listener[1]), listener[2] as 'pause' | 'resume');
    else if (letter) result = await deadLetterAction(this.admin, ...names(letter[1], letter[2]), letter[3] as 'replay' | 'purge', body);
    else if (resize) result = await resizeAction(this.admin, names(resize[1], 'x')[0], body);
    else throw new DashboardHttpError(404, `no dashboard action ${JSON.stringify(route)}`);
    this.emit('action', result);
    sendJson(response, 200, result);
  }

  /** The live view of a group over server-sent events, from the group's shared watch. */
  private stream(request: IncomingMessage, response: ServerResponse, streamPrefix: string, consumerGroup: string): void {
    response.writeHead(200, {
      ...SECURITY_HEADERS,
      'content-type': 'text/event-stream; charset=utf-8',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    response.write(`retry: ${this.options.refreshMs}\n\n`);
    this.live.add(response);
    const unsubscribe = this.watch(streamPrefix, consumerGroup).subscribe((event, data) => {
      response.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    });
    const keepalive = setInterval(() => response.write(': keepalive\n\n'), KEEPALIVE_MS);
    const end = () => {
      clearInterval(keepalive);
      unsubscribe();
      this.live.delete(response);
    };
    request.once('close', end);
    response.once('close', end);
  }

  private watch(streamPrefix: string, consumerGroup: string): GroupWatch {
    const id = `${streamPrefix}\u0000${consumerGroup}`;
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

  /** One overview read at a time, reused for a while: many browsers polling cost Redis one read. */
  private readOverview(): Promise<Overview> {
    const maxAgeMs = Math.max(5000, this.options.refreshMs * 2);
    if (this.overview && Date.now() - this.overview.at < maxAgeMs) return this.overview.value;
    const value = readOverview(this.admin, (s, g) => this.watches.get(`${s}\u0000${g}`)?.latest(maxAgeMs));
    this.overview = { at: Date.now(), value };
    // A failed read is not kept: the next request tries again.
    value.catch(() => {
      if (this.overview?.value === value) this.overview = undefined;
    });
    return value;
  }

  private sweep(): void {
    for (const [id, watch] of this.watches) {
      if (watch.isIdle()) {
        this.watches.delete(id);
        this.problems.delete(id);
        void watch.stop();
      }
    }
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
