import net from 'node:net';

/** Requests travel client -> Redis; replies travel Redis -> client. */
export type Direction = 'request' | 'reply';

/** Looks at the bytes of one request chunk (RESP, read as latin1) and says whether a rule applies to it. */
export type RequestMatcher = (request: string) => boolean;

/** Looks at the bytes of one reply chunk (RESP, read as latin1) and says whether a rule applies to it. */
export type ReplyMatcher = (reply: string) => boolean;

interface Chunk {
  data: Buffer;
  dueAt: number;
  /** Called when the chunk is written on: a request that arms a "drop the reply" rule. */
  onSent?: () => void;
  /** Held by `holdNextRequest`: this chunk and those after it wait until the rule is released. */
  hold?: HoldRule;
}

/** One direction of one proxied connection: chunks wait here until they are due, in order. */
interface Lane {
  to: net.Socket;
  queue: Chunk[];
  timer: NodeJS.Timeout | undefined;
  /** Its connection is stalled (`stallConnectionOf`): chunks wait here, in order, until it recovers. */
  stalled: boolean;
}

interface Link {
  client: net.Socket;
  upstream: net.Socket;
  request: Lane;
  reply: Lane;
  /** A matched request reached Redis: the next reply bytes cut the connection instead of arriving. */
  dropReply: (() => void) | undefined;
  closed: boolean;
  /** Silent for good in both directions, never closed (`blackholeOpenConnections`). */
  blackholed: boolean;
  /** The command names its requests began with (at most CARRIED_NAMES_CAP), for `stallConnectionOf({ carried })`. */
  carried: Set<string>;
}

/** Distinct command names a connection remembers: a client's connection sends a few kinds, not many. */
const CARRIED_NAMES_CAP = 32;

/** The first command name of a RESP request chunk (`*<n>\r\n$<len>\r\n<NAME>\r\n`), upper-cased. */
const FIRST_COMMAND = /^\*\d+\r\n\$\d+\r\n([A-Za-z]+)\r\n/;

interface StallRule {
  matches: RequestMatcher;
  links: Link[];
  stalled: () => void;
  recovered: boolean;
}

interface DropRule {
  matches: RequestMatcher;
  dropped: () => void;
  onArmed: (() => void) | undefined;
}

interface HoldRule {
  matches: RequestMatcher;
  arrived: () => void;
  lane?: Lane;
  released: boolean;
}

/** A stalled connection: `stalled` resolves when one stopped; `recover()` lets everything that waited on it go on. */
export interface StalledConnection {
  stalled: Promise<void>;
  recover(): void;
}

/** A request held at the proxy: `arrived` resolves when it got there; `release()` lets it (and what followed) go on. */
export interface HeldRequest {
  arrived: Promise<void>;
  release(): void;
}

/**
 * A loopback TCP proxy in front of a Redis server, for network faults:
 * - `freeze()` stops forwarding in both directions (a partition, or a paused process: nothing is
 *   lost, it is delivered on `thaw()`);
 * - `cut()` closes every connection (a crash or a reset);
 * - `blackholeOpenConnections()` silences the open connections for good without closing them (half-open);
 * - `blackholeConnectionOf(match)` does that to the one connection that next carries a matching
 *   request (one of a member's several connections: its acks' own, its reads', its subscriber's);
 * - `stallConnectionOf(match)` stalls one connection for a while: no answer, no close, nothing lost,
 *   until `recover()` (one connection of a client stuck, then well again); `{ carried: 'SUBSCRIBE' }`
 *   picks the open connections that already sent such a command (a subscriber that subscribed at join);
 * - `delay(direction, ms, jitterMs)` makes requests or replies late (a slow network, a busy Redis whose
 *   answer arrives late although the command ran at once), settable and clearable while connections
 *   are open; chunks keep their order, and those already under way keep their schedule;
 * - `dropNextReply(match)` lets the next matching request reach Redis, then cuts its connection
 *   before any reply bytes get back: the command ran, the client never learns it (a lost reply);
 * - `holdNextRequest(match)` stops the next matching request at the proxy until released: a window
 *   between two calls of a client in which a test makes something else happen;
 * - `delayMatching(match, ms)` makes every matching request late by `ms` more (and what follows it
 *   on its connection, in order): one kind of call slow while the others are not, e.g. heartbeats
 *   whose answers come late while reads go at full speed;
 * - `delayRepliesMatching(match, ms)` does the same to matching replies (and what follows them on
 *   their connection): one kind of answer slow, e.g. large ones such as assignments while small
 *   refusals come in time.
 */
export class TcpProxy {
  private readonly server: net.Server;
  private readonly links = new Set<Link>();
  private frozen = false;
  private readonly delays: Record<Direction, { ms: number; jitterMs: number }> = {
    request: { ms: 0, jitterMs: 0 },
    reply: { ms: 0, jitterMs: 0 },
  };
  private dropRules: DropRule[] = [];
  private holdRules: HoldRule[] = [];
  private matchDelays: { matches: RequestMatcher; ms: number }[] = [];
  private replyDelays: { matches: ReplyMatcher; ms: number }[] = [];
  private blackholeRules: { matches: RequestMatcher; silenced: () => void }[] = [];
  private stallRules: StallRule[] = [];
  /** Witnesses of what goes to Redis (`watchRequests`): not faults, so `clearFaults()` keeps them. */
  private requestWatchers: ((request: string) => void)[] = [];
  port = 0;
  /** Connections accepted so far (also while frozen, when they wait with nothing forwarded). */
  accepted = 0;

  private constructor(private readonly targetPort: number) {
    this.server = net.createServer((client) => this.accept(client));
  }

  static async start(targetPort: number): Promise<TcpProxy> {
    const proxy = new TcpProxy(targetPort);
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    proxy.port = (proxy.server.address() as net.AddressInfo).port;
    return proxy;
  }

  /**
   * Matches a request chunk that carries the command `name` (e.g. 'XREADGROUP'), optionally with
   * `containing` somewhere in it (a key, an entry id): RESP sends the name as a bulk string.
   */
  static command(name: string, containing?: string): RequestMatcher {
    const bulk = `$${name.length}\r\n${name.toUpperCase()}\r\n`;
    return (request) => request.toUpperCase().includes(bulk) && (containing === undefined || request.includes(containing));
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Connections open now. */
  get connections(): number {
    return this.links.size;
  }

  freeze(): void {
    this.frozen = true;
    for (const link of this.links) {
      // Stop reading too, so that the sockets' own buffers fill as they would on a real partition.
      link.client.pause();
      link.upstream.pause();
      for (const lane of [link.request, link.reply]) {
        clearTimeout(lane.timer);
        lane.timer = undefined;
      }
    }
  }

  thaw(): void {
    this.frozen = false;
    for (const link of this.links) {
      link.client.resume();
      link.upstream.resume();
      this.pump(link.request);
      this.pump(link.reply);
    }
  }

  /**
   * Every connection open now goes silent for good, both ways, and stays open: what either side
   * sends is taken and dropped, with no FIN, no RST and no error (a half-open connection: NAT or
   * firewall state dropped). Connections made afterwards work normally.
   */
  blackholeOpenConnections(): void {
    for (const link of this.links) {
      link.blackholed = true;
      for (const lane of [link.request, link.reply]) {
        clearTimeout(lane.timer);
        lane.timer = undefined;
        lane.queue = [];
      }
    }
  }

  /**
   * The next request (any connection, from now on) that `match` accepts is dropped, and its
   * connection goes silent for good as `blackholeOpenConnections` makes them: half-open, one
   * connection only, the others of the same client untouched. Resolves when it happened.
   */
  blackholeConnectionOf(match: RequestMatcher): Promise<void> {
    return new Promise<void>((silenced) => this.blackholeRules.push({ matches: match, silenced }));
  }

  /**
   * Stalls one connection: the next one to carry a request that `match` accepts (that request
   * stalls with it), or, with `{ carried: NAME }`, every open connection that already sent a NAME
   * command. Nothing moves on it either way, nothing is dropped and nothing closes (the client may
   * reset it) until `recover()`, which lets what waited go on, in order. `clearFaults()` recovers too.
   */
  stallConnectionOf(target: RequestMatcher | { carried: string }): StalledConnection {
    let stalled: () => void = () => undefined;
    const promise = new Promise<void>((resolve) => (stalled = resolve));
    const rule: StallRule = { matches: () => false, links: [], stalled: () => stalled(), recovered: false };
    this.stallRules.push(rule);
    if (typeof target === 'function') {
      rule.matches = target;
    } else {
      for (const link of this.links) if (link.carried.has(target.carried.toUpperCase())) this.stallLink(rule, link);
    }
    return {
      stalled: promise,
      recover: () => this.recover(rule),
    };
  }

  private stallLink(rule: StallRule, link: Link): void {
    rule.links.push(link);
    for (const lane of [link.request, link.reply]) {
      lane.stalled = true;
      clearTimeout(lane.timer);
      lane.timer = undefined;
    }
    rule.stalled();
  }

  private recover(rule: StallRule): void {
    if (rule.recovered) return;
    rule.recovered = true;
    this.stallRules = this.stallRules.filter((r) => r !== rule);
    for (const link of rule.links) {
      for (const lane of [link.request, link.reply]) {
        lane.stalled = false;
        this.pump(lane);
      }
    }
  }

  cut(): void {
    for (const link of [...this.links]) this.close(link);
  }

  /**
   * Delays every chunk of one direction by `ms` (plus up to `jitterMs` more, drawn per chunk) from
   * now on; `delay(direction, 0)` makes it fast again, releasing what waits (a long delay can so
   * hold replies until the test says). Order within a connection is kept.
   */
  delay(direction: Direction, ms: number, jitterMs = 0): void {
    this.delays[direction] = { ms, jitterMs };
    const latest = Date.now() + ms + jitterMs;
    for (const link of this.links) {
      const lane = link[direction];
      // Capping keeps the queue in order: dueAt only ever shrinks to a common bound.
      for (const chunk of lane.queue) chunk.dueAt = Math.min(chunk.dueAt, latest);
      clearTimeout(lane.timer);
      lane.timer = undefined;
      this.pump(lane);
    }
  }

  /**
   * Every request that `match` accepts from now on waits `ms` at the proxy (on top of any request
   * delay); what its client sends after it on the same connection waits behind it, in order.
   * `clearFaults()` ends it and lets what waits go on.
   */
  delayMatching(match: RequestMatcher, ms: number): void {
    this.matchDelays.push({ matches: match, ms });
  }

  /**
   * Every reply chunk that `match` accepts from now on waits `ms` at the proxy (on top of any reply
   * delay); what Redis sends after it on the same connection waits behind it, in order.
   * `clearFaults()` ends it and lets what waits go on.
   */
  delayRepliesMatching(match: ReplyMatcher, ms: number): void {
    this.replyDelays.push({ matches: match, ms });
  }

  /** Both directions fast again, no request or reply delayed by what it is, no connection stalled, and no reply is dropped any more. */
  clearFaults(): void {
    for (const rule of [...this.stallRules]) this.recover(rule);
    this.matchDelays = [];
    this.replyDelays = [];
    this.delay('request', 0);
    this.delay('reply', 0);
    this.dropRules = [];
    this.blackholeRules = [];
  }

  /**
   * The next request (any connection) that `match` accepts goes through to Redis; then its
   * connection is cut when the first reply bytes come back, so the client never sees the reply
   * (nor replies to other commands still outstanding on that connection, as with a real reset).
   * Resolves when the reply was dropped; `onArmed` is called when the matched request was written
   * to Redis (e.g. a blocking read is now waiting there). Each call drops one reply.
   */
  dropNextReply(match: RequestMatcher = () => true, onArmed?: () => void): Promise<void> {
    return new Promise<void>((dropped) => this.dropRules.push({ matches: match, dropped, onArmed }));
  }

  /**
   * The next request (any connection) that `match` accepts stops at the proxy, with everything
   * sent after it on its connection, until `release()`: the request before it has run, this one
   * has not (a window between two calls, to let something else happen in it).
   */
  holdNextRequest(match: RequestMatcher): HeldRequest {
    let arrived: () => void = () => undefined;
    const rule: HoldRule = { matches: match, arrived: () => arrived(), released: false };
    const promise = new Promise<void>((resolve) => (arrived = resolve));
    this.holdRules.push(rule);
    return {
      arrived: promise,
      release: () => {
        rule.released = true;
        this.holdRules = this.holdRules.filter((r) => r !== rule);
        if (rule.lane) this.pump(rule.lane);
      },
    };
  }

  /**
   * Calls `watch` with every request chunk on its way to Redis from now on (RESP, read as latin1; a
   * chunk a half-open connection swallows is not one): a witness of what a client sent, whatever
   * became of it in Redis since. It changes nothing.
   */
  watchRequests(watch: (request: string) => void): void {
    this.requestWatchers.push(watch);
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket): void {
    this.accepted += 1;
    const upstream = net.connect(this.targetPort, '127.0.0.1');
    const link: Link = {
      client,
      upstream,
      request: { to: upstream, queue: [], timer: undefined, stalled: false },
      reply: { to: client, queue: [], timer: undefined, stalled: false },
      dropReply: undefined,
      closed: false,
      blackholed: false,
      carried: new Set(),
    };
    this.links.add(link);
    if (this.frozen) {
      client.pause();
      upstream.pause();
    }
    client.on('data', (data: Buffer) => this.fromClient(link, data));
    upstream.on('data', (data: Buffer) => this.fromRedis(link, data));
    const close = () => this.close(link);
    client.on('error', close).on('close', close);
    upstream.on('error', close).on('close', close);
  }

  private fromClient(link: Link, data: Buffer): void {
    if (link.blackholed) return;
    const name = FIRST_COMMAND.exec(data.toString('latin1', 0, 64))?.[1];
    if (name && link.carried.size < CARRIED_NAMES_CAP) link.carried.add(name.toUpperCase());
    const stall =
      this.stallRules.length > 0 ? this.stallRules.find((r) => r.links.length === 0 && r.matches(data.toString('latin1'))) : undefined;
    if (stall) this.stallLink(stall, link);
    const silence = this.blackholeRules.length > 0 ? this.blackholeRules.find((r) => r.matches(data.toString('latin1'))) : undefined;
    if (silence) {
      this.blackholeRules = this.blackholeRules.filter((r) => r !== silence);
      link.blackholed = true;
      for (const lane of [link.request, link.reply]) {
        clearTimeout(lane.timer);
        lane.timer = undefined;
        lane.queue = [];
      }
      silence.silenced();
      return;
    }
    let onSent: (() => void) | undefined;
    const rule = this.dropRules.length > 0 ? this.dropRules.find((r) => r.matches(data.toString('latin1'))) : undefined;
    if (rule) {
      this.dropRules = this.dropRules.filter((r) => r !== rule);
      // Armed when the request is written on (after any request delay), not when it arrives here:
      // replies to earlier commands still on their way back must not trigger the cut.
      onSent = () => {
        link.dropReply = rule.dropped;
        rule.onArmed?.();
      };
    }
    const hold = this.holdRules.length > 0 ? this.holdRules.find((r) => !r.lane && r.matches(data.toString('latin1'))) : undefined;
    if (hold) {
      hold.lane = link.request;
      hold.arrived();
    }
    const extra = this.matchDelays.length > 0 ? (this.matchDelays.find((r) => r.matches(data.toString('latin1')))?.ms ?? 0) : 0;
    const delay = extra > 0 ? { ms: this.delays.request.ms + extra, jitterMs: this.delays.request.jitterMs } : this.delays.request;
    for (const watch of this.requestWatchers) watch(data.toString('latin1'));
    this.enqueue(link.request, data, delay, onSent, hold);
  }

  private fromRedis(link: Link, data: Buffer): void {
    if (link.blackholed) return;
    if (link.dropReply) {
      const dropped = link.dropReply;
      link.dropReply = undefined;
      this.close(link);
      dropped();
      return;
    }
    const extra = this.replyDelays.length > 0 ? (this.replyDelays.find((r) => r.matches(data.toString('latin1')))?.ms ?? 0) : 0;
    const delay = extra > 0 ? { ms: this.delays.reply.ms + extra, jitterMs: this.delays.reply.jitterMs } : this.delays.reply;
    this.enqueue(link.reply, data, delay);
  }

  private enqueue(lane: Lane, data: Buffer, delay: { ms: number; jitterMs: number }, onSent?: () => void, hold?: HoldRule): void {
    const last = lane.queue[lane.queue.length - 1]?.dueAt ?? 0;
    const dueAt = Math.max(last, Date.now() + delay.ms + Math.random() * delay.jitterMs);
    lane.queue.push({ data, dueAt, onSent, hold });
    this.pump(lane);
  }

  /** Writes the chunks that are due, in order; sets a timer for the next one. Nothing moves while frozen. */
  private pump(lane: Lane): void {
    if (this.frozen || lane.timer || lane.stalled) return;
    while (lane.queue.length > 0) {
      if (lane.queue[0].hold && !lane.queue[0].hold.released) return;
      const wait = lane.queue[0].dueAt - Date.now();
      if (wait > 0) {
        lane.timer = setTimeout(() => {
          lane.timer = undefined;
          this.pump(lane);
        }, wait);
        return;
      }
      const chunk = lane.queue.shift()!;
      if (lane.to.destroyed) return;
      chunk.onSent?.();
      lane.to.write(chunk.data);
    }
  }

  private close(link: Link): void {
    if (link.closed) return;
    link.closed = true;
    for (const lane of [link.request, link.reply]) {
      clearTimeout(lane.timer);
      lane.timer = undefined;
      lane.queue = [];
    }
    link.client.destroy();
    link.upstream.destroy();
    this.links.delete(link);
  }
}
