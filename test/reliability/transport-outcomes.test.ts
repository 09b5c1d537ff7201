import { describe, expect, it } from 'vitest';
import { check } from './checker';
import type { TransportEpisode, TransportLine } from './records';
import { transportOutcomes } from './transport-outcomes';

/** The transport's checker must catch each of its broken promises; one that passes everything proves nothing. */
const TIMEOUT_MS = 1000;

const client = (e: string, t: number, more: Partial<TransportLine> = {}): TransportLine => ({ e, t, r: 'client', ...more });
const server = (e: string, t: number, more: Partial<TransportLine> = {}): TransportLine => ({ e, t, r: 'server', ...more });

/** Request q sent at `t`, answered (by a handler run) `after` ms later. */
function answered(q: number, t: number, after = 20): { client: TransportLine[]; server: TransportLine[] } {
  return {
    client: [client('send', t, { q }), client('reply', t + after, { q, v: q }), client('complete', t + after, { q })],
    server: [server('request', t + after / 2, { q, s: 0, id: `${t}-0` })],
  };
}

/** Event q emitted at `t`, handled as entry 1/<t>-0 and acknowledged after. */
function handled(q: number, t: number): { client: TransportLine[]; server: TransportLine[] } {
  const entry = { q, s: 1, id: `${t}-0` };
  return {
    client: [client('emit', t, { q }), client('emitted', t + 1, { q, ok: true })],
    server: [
      server('event-start', t + 2, entry),
      server('event-end', t + 4, entry),
      server('ack', t + 6, { st: 'events', s: 1, ids: [entry.id], ok: true }),
    ],
  };
}

function anEpisode(parts: { client: TransportLine[]; server: TransportLine[] }[], more: Partial<TransportEpisode> = {}): TransportEpisode {
  return {
    at: 0,
    timeoutMs: TIMEOUT_MS,
    requestStream: 'rpc',
    eventStream: 'events',
    client: parts.flatMap((p) => p.client),
    server: parts.flatMap((p) => p.server),
    forged: [{ shard: 2, id: '50-0', replyTo: 'rsc:shard:{chaos:0}' }],
    targetsTouched: [],
    strayReplies: [],
    unacknowledged: [],
    linkFaults: [],
    ...more,
  };
}

const refusal = server('refused', 60, { s: 2, id: '50-0' });
const clean = () => anEpisode([answered(0, 100), answered(1, 200), handled(0, 100), handled(1, 200), { client: [], server: [refusal] }]);

describe('transport checker', () => {
  it('a clean episode: every request answered once with its own answer, every event handled then acknowledged, the forgery refused', () => {
    const { problems, figures } = transportOutcomes([clean()]);
    expect(problems).toEqual([]);
    expect(figures).toMatchObject({ episodes: 1, requests: 2, answered: 2, events: 2, handled: 2, forged: 1, refused: 1, duplicates: 0 });
  });

  it('a timeout at the client timeout is a visible failure; one before it or long after it, or no outcome at all, is not', () => {
    const timedOut = (q: number, t: number, after: number) => ({
      client: [client('send', t, { q }), client('failed', t + after, { q, name: 'RequestTimeoutError', msg: 'no reply' })],
      server: [],
    });
    const episode = anEpisode([
      timedOut(0, 100, TIMEOUT_MS + 5),
      timedOut(1, 200, TIMEOUT_MS / 2),
      timedOut(2, 300, TIMEOUT_MS + 5000),
      { client: [client('send', 400, { q: 3 })], server: [refusal] },
    ]);
    const { problems, figures } = transportOutcomes([episode]);
    expect(figures.timedOut).toBe(3);
    expect(problems).toEqual([
      'transport 1: request #1 failed with RequestTimeoutError 500 ms after its send (timeout 1000 ms)',
      'transport 1: request #2 failed with RequestTimeoutError 6000 ms after its send (timeout 1000 ms)',
      'transport 1: request #3 never settled: no answer, no error',
    ]);
  });

  it("finds a request answered twice, with another request's answer, or answered with no handler run for it", () => {
    const twice = answered(0, 100);
    twice.client.push(client('reply', 130, { q: 0, v: 0 }));
    const crossed = answered(1, 200);
    crossed.client[1] = client('reply', 220, { q: 1, v: 7 });
    const fromNowhere = { client: answered(2, 300).client, server: [refusal] };
    const { problems } = transportOutcomes([anEpisode([twice, crossed, fromNowhere])]);
    expect(problems).toEqual([
      'transport 1: request #0 answered 2 time(s), settled 1 times: complete',
      "transport 1: request #1 answered with request #7's answer",
      'transport 1: request #2 answered, yet no server handler ran for it',
    ]);
  });

  it('finds an event acknowledged before its handler returned, and one emitted but never handled', () => {
    const early = handled(0, 100);
    early.server[2] = server('ack', 103, { st: 'events', s: 1, ids: ['100-0'], ok: true });
    const lost = { client: handled(1, 200).client, server: [refusal] };
    const { problems } = transportOutcomes([anEpisode([early, lost])]);
    expect(problems).toEqual([
      'transport 1: event entry 1/100-0 acknowledged before its handler returned',
      'transport 1: event #1 emitted, never handled',
    ]);
  });

  it("explains an event handled again by a fault on the server's link that could redeliver, and only then", () => {
    const again = handled(0, 100);
    again.server.push(server('event-start', 900, { q: 0, s: 1, id: '100-0' }), server('event-end', 902, { q: 0, s: 1, id: '100-0' }));
    const parts = [again, { client: [], server: [refusal] }];
    const delayOnly = transportOutcomes([
      anEpisode(parts, { linkFaults: [{ link: 'server', what: 'delay', at: 50, until: 500, redelivers: false }] }),
    ]);
    expect(delayOnly.problems).toEqual([
      "transport 1: event entry 1/100-0 (#0) handled again 798 ms after its first run, no fault on the server's link to explain it",
    ]);
    const cut = transportOutcomes([
      anEpisode(parts, { linkFaults: [{ link: 'server', what: 'reply-lost', at: 50, until: 60, redelivers: true }] }),
    ]);
    expect(cut.problems).toEqual([]);
    expect(cut.figures.duplicates).toBe(1);
  });

  it("explains one event in two entries by a lost answer on the client's link (its producer wrote it again), and only then", () => {
    const first = handled(0, 100);
    const second = handled(0, 300);
    second.client = [];
    const parts = [first, second, { client: [], server: [refusal] }];
    expect(transportOutcomes([anEpisode(parts)]).problems).toEqual([
      "transport 1: event #0 written 2 times (1/100-0, 1/300-0), no fault on the client's link to explain it",
    ]);
    const lost = { link: 'client' as const, what: 'write-reply-lost (events)', at: 90, until: 110, redelivers: true };
    expect(transportOutcomes([anEpisode(parts, { linkFaults: [lost] })]).problems).toEqual([]);
  });

  it('finds a forged request not refused or handled as a request, its target written, and a reply outside an inbox', () => {
    const episode = anEpisode([answered(0, 100), { client: [], server: [server('request', 70, { q: -1, s: 2, id: '50-0' })] }], {
      targetsTouched: ['rsc-transport:inbox:decoy changed: was [], now [reply]'],
      strayReplies: ['rsc:shard:{chaos:0} 70-0'],
    });
    expect(transportOutcomes([episode]).problems).toEqual([
      'transport 1: forged request 2/50-0 (rsc-reply-to rsc:shard:{chaos:0}) not refused',
      'transport 1: forged request 2/50-0 handled as a request',
      'transport 1: forged target rsc-transport:inbox:decoy changed: was [], now [reply]',
      'transport 1: reply outside an inbox: rsc:shard:{chaos:0} 70-0',
    ]);
  });

  it('finds a client whose inbox reader was half-open and never reset (its reads not counted as timed out)', () => {
    const silenced = { link: 'client' as const, what: 'half-open (inbox reads)', at: 50, until: 3550, redelivers: true };
    const stats = (n: number) => ({ client: [client('stats', 4000, { inboxReadTimeouts: n })], server: [refusal] });
    expect(transportOutcomes([anEpisode([stats(1)], { linkFaults: [silenced] })]).problems).toEqual([]);
    expect(transportOutcomes([anEpisode([stats(0)], { linkFaults: [silenced] })]).problems).toEqual([
      "transport 1: the client's inbox reader was half-open and never reset (inboxReadTimeouts 0)",
    ]);
  });

  it("is the checker's report: its broken promises in `transport`, its figures beside", () => {
    const broken = anEpisode([answered(0, 100)], { unacknowledged: ['events 1/100-0'] });
    const report = check([], [], [], new Set(), { transportEpisodes: [clean(), broken] });
    expect(report.transport).toEqual([
      'transport 2: forged request 2/50-0 (rsc-reply-to rsc:shard:{chaos:0}) not refused',
      'transport 2: events 1/100-0 not acknowledged when the server stopped',
    ]);
    expect(report.transportFigures).toMatchObject({ episodes: 2, requests: 3, answered: 3 });
  });
});
