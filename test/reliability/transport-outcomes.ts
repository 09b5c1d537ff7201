/**
 * The promises of the Nest transport as soak actors (transport-actors.ts; SPEC 10.1, 10.4;
 * docs/nestjs.md), a pure function of what its processes recorded and what the harness found in
 * Redis: every request settles exactly once, with its own answer or visibly failed (the client's
 * RequestTimeoutError at its timeout, or its send's error before it); every event is handled before
 * it is acknowledged and handled at all, a second run explained by a fault that can redeliver; a
 * reply is written to an inbox of the transport only, and a forged request's target is untouched.
 */
import type { TransportEpisode, TransportLine } from './records';

/** How much earlier than `timeoutMs` after its send a RequestTimeoutError may come: the timer starts as send() subscribes. */
const EARLY_MS = 50;

/**
 * How much later than `timeoutMs` after its send a request may still settle: the timer fires on a
 * busy event loop of a busy 2-core machine. A reply accepted after its timeout, or a failure later
 * still, is one nobody waits for any more.
 */
export const LATE_SETTLE_MS = 1500;

/** The link fault that silences the client's inbox reader (transport-actors.ts), when a read was silenced. */
export const INBOX_READER_HALF_OPEN = 'half-open (inbox reads)';

/** How long before a handler's first run a fault can still explain a second (the run may have started just before it hit). */
const EXPLAIN_BEFORE_MS = 1000;

export interface TransportFigures {
  episodes: number;
  requests: number;
  answered: number;
  timedOut: number;
  /** Requests that failed before their timeout: the send itself failed (no Redis on the client's link). */
  sendFailed: number;
  events: number;
  /** Events whose emit failed visibly (not required to be handled). */
  emitFailed: number;
  handled: number;
  /** Event handler runs after an entry's first (at-least-once, each explained by a fault). */
  duplicates: number;
  forged: number;
  refused: number;
  /** Replies the client dropped because their request had timed out (client `lateReplies`). */
  lateReplies: number;
  /** Inbox reads that did not come back in time, their connection reset (client `inboxReadTimeouts`). */
  inboxReadTimeouts: number;
  /** Reply writes Redis did not take, their request retried (server `failedReplies`). */
  failedReplies: number;
}

export function emptyTransportFigures(): TransportFigures {
  return {
    episodes: 0,
    requests: 0,
    answered: 0,
    timedOut: 0,
    sendFailed: 0,
    events: 0,
    emitFailed: 0,
    handled: 0,
    duplicates: 0,
    forged: 0,
    refused: 0,
    lateReplies: 0,
    inboxReadTimeouts: 0,
    failedReplies: 0,
  };
}

/** Groups lines by a key, in time order. */
function byKey(lines: TransportLine[], key: (line: TransportLine) => string | undefined): Map<string, TransportLine[]> {
  const groups = new Map<string, TransportLine[]>();
  for (const line of [...lines].sort((a, b) => a.t - b.t)) {
    const k = key(line);
    if (k === undefined) continue;
    const list = groups.get(k);
    if (list) list.push(line);
    else groups.set(k, [line]);
  }
  return groups;
}

const stat = (lines: TransportLine[], name: string) => lines.filter((l) => l.e === 'stats').reduce((n, l) => n + (Number(l[name]) || 0), 0);

/** Every broken promise of the episodes (must be none), and what they did. */
export function transportOutcomes(episodes: TransportEpisode[]): { problems: string[]; figures: TransportFigures } {
  const problems: string[] = [];
  const figures = emptyTransportFigures();
  for (const [n, episode] of episodes.entries()) {
    const say = (line: string) => problems.push(`transport ${n + 1}: ${line}`);
    figures.episodes += 1;
    requestOutcomes(episode, figures, say);
    eventOutcomes(episode, figures, say);
    forgeryOutcomes(episode, figures, say);
    figures.lateReplies += stat(episode.client, 'lateReplies');
    figures.inboxReadTimeouts += stat(episode.client, 'inboxReadTimeouts');
    figures.failedReplies += stat(episode.server, 'failedReplies');
    // A half-open inbox reader must be found out and reset (SPEC 10.1), or every later request times out.
    const silencedReader = episode.linkFaults.some((f) => f.link === 'client' && f.what === INBOX_READER_HALF_OPEN);
    if (silencedReader && stat(episode.client, 'inboxReadTimeouts') === 0 && episode.client.some((l) => l.e === 'stats'))
      say("the client's inbox reader was half-open and never reset (inboxReadTimeouts 0)");
    for (const l of episode.client.filter((l) => l.e === 'unsettled'))
      say(`the client stopped with ${l.requests} request(s) and ${l.events} event(s) unsettled`);
    for (const entry of episode.unacknowledged) say(`${entry} not acknowledged when the server stopped`);
  }
  return { problems, figures };
}

/** Each request: one outcome, its own answer from a handler that ran, or a visible failure in time. */
function requestOutcomes(episode: TransportEpisode, figures: TransportFigures, say: (line: string) => void): void {
  const handledSeqs = new Set(episode.server.filter((l) => l.e === 'request').map((l) => l.q));
  const bySeq = byKey(episode.client, (l) => (['send', 'reply', 'complete', 'failed'].includes(l.e) ? String(l.q) : undefined));
  for (const [q, lines] of bySeq) {
    const sent = lines.find((l) => l.e === 'send');
    if (!sent) continue;
    figures.requests += 1;
    const replies = lines.filter((l) => l.e === 'reply');
    const outcomes = lines.filter((l) => l.e === 'complete' || l.e === 'failed');
    if (outcomes.length === 0) {
      say(`request #${q} never settled: no answer, no error`);
      continue;
    }
    if (outcomes.length > 1 || replies.length > 1)
      say(`request #${q} answered ${replies.length} time(s), settled ${outcomes.length} times: ${outcomes.map((l) => l.e).join(', ')}`);
    const outcome = outcomes[0];
    const after = Math.round(outcome.t - sent.t);
    if (outcome.e === 'complete') {
      figures.answered += 1;
      if (replies.length === 0) say(`request #${q} completed without an answer`);
      for (const reply of replies) if (reply.v !== Number(q)) say(`request #${q} answered with request #${reply.v}'s answer`);
      if (!handledSeqs.has(Number(q))) say(`request #${q} answered, yet no server handler ran for it`);
      if (after > episode.timeoutMs + LATE_SETTLE_MS)
        say(`request #${q} answered ${after} ms after its send (timeout ${episode.timeoutMs} ms)`);
    } else if (outcome.name === 'RequestTimeoutError') {
      figures.timedOut += 1;
      if (after < episode.timeoutMs - EARLY_MS || after > episode.timeoutMs + LATE_SETTLE_MS)
        say(`request #${q} failed with RequestTimeoutError ${after} ms after its send (timeout ${episode.timeoutMs} ms)`);
    } else {
      figures.sendFailed += 1;
      if (after > episode.timeoutMs + LATE_SETTLE_MS)
        say(`request #${q} failed ${after} ms after its send (timeout ${episode.timeoutMs} ms): ${outcome.name}: ${outcome.msg}`);
    }
  }
}

/** Each event emitted: handled, never acknowledged before its handler returned, a second run explained by a fault. */
function eventOutcomes(episode: TransportEpisode, figures: TransportFigures, say: (line: string) => void): void {
  const server = [...episode.server].sort((a, b) => a.t - b.t);
  const emitted = episode.client.filter((l) => l.e === 'emitted');
  figures.events += emitted.length;
  figures.emitFailed += emitted.filter((l) => !l.ok).length;
  const ended = new Set<string>();
  for (const line of server) {
    if (line.e === 'event-end') ended.add(`${line.s}/${line.id}`);
    if (line.e !== 'ack' || !line.ok || line.st !== episode.eventStream) continue;
    for (const id of line.ids ?? [])
      if (!ended.has(`${line.s}/${id}`)) say(`event entry ${line.s}/${id} acknowledged before its handler returned`);
  }
  const handledSeqs = new Set(server.filter((l) => l.e === 'event-end').map((l) => l.q));
  figures.handled += handledSeqs.size;
  for (const l of emitted) if (l.ok && !handledSeqs.has(l.q)) say(`event #${l.q} emitted, never handled`);

  const explained = (link: 'server' | 'client', first: number, again: number) =>
    episode.linkFaults.some((f) => f.link === link && f.redelivers && f.until >= first - EXPLAIN_BEFORE_MS && f.at <= again);
  for (const [entry, runs] of byKey(server, (l) => (l.e === 'event-start' ? `${l.s}/${l.id}` : undefined))) {
    for (const run of runs.slice(1)) {
      figures.duplicates += 1;
      if (!explained('server', runs[0].t, run.t))
        say(
          `event entry ${entry} (#${run.q}) handled again ${Math.round(run.t - runs[0].t)} ms after its first run, no fault on the server's link to explain it`,
        );
    }
  }
  // One event in two entries: the client's producer sent its write again after a reply lost on its link.
  for (const [q, runs] of byKey(server, (l) => (l.e === 'event-start' ? String(l.q) : undefined))) {
    const entries = new Set(runs.map((l) => `${l.s}/${l.id}`));
    if (entries.size > 1 && !explained('client', runs[0].t - 2 * episode.timeoutMs, runs[runs.length - 1].t))
      say(`event #${q} written ${entries.size} times (${[...entries].join(', ')}), no fault on the client's link to explain it`);
  }
}

/** Forged requests: each refused, none handled, no target touched, no reply outside an inbox. */
function forgeryOutcomes(episode: TransportEpisode, figures: TransportFigures, say: (line: string) => void): void {
  const refused = new Set(episode.server.filter((l) => l.e === 'refused').map((l) => `${l.s}/${l.id}`));
  figures.forged += episode.forged.length;
  for (const forged of episode.forged) {
    if (refused.has(`${forged.shard}/${forged.id}`)) figures.refused += 1;
    else say(`forged request ${forged.shard}/${forged.id} (rsc-reply-to ${forged.replyTo}) not refused`);
  }
  for (const l of episode.server) if (l.e === 'request' && (l.q ?? 0) < 0) say(`forged request ${l.s}/${l.id} handled as a request`);
  for (const line of episode.targetsTouched) say(`forged target ${line}`);
  for (const line of episode.strayReplies) say(`reply outside an inbox: ${line}`);
}
