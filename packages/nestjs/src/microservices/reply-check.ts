import type { InboxReply } from './reply-inbox';

/**
 * Replies kept for a request whose XADD has not answered yet (the server can read and answer an
 * entry before its writer hears back). Only a forger makes more than one: past this many, later ones
 * are refused, so a flood costs the request at worst its answer (a timeout), never a false one.
 */
export const EARLY_REPLIES_PER_REQUEST = 4;

/** What a client knows of one request it waits for. */
export interface AwaitedRequest {
  /** The requestRef of the entry this client's XADD wrote, once it answered. */
  sent?: string;
  /** Replies that came before `sent` was known, to be checked then (at most EARLY_REPLIES_PER_REQUEST). */
  early: InboxReply[];
}

/**
 * What becomes of a reply to a request the client waits for (SPEC 10.4): accepted only when it
 * answers the entry the client wrote; held while that entry is not known yet; refused otherwise,
 * with the reason.
 */
export function checkReply(request: AwaitedRequest, reply: InboxReply): { accept: true } | { hold: true } | { refuse: string } {
  if (request.sent === undefined) {
    return request.early.length < EARLY_REPLIES_PER_REQUEST
      ? { hold: true }
      : { refuse: `more than ${EARLY_REPLIES_PER_REQUEST} replies came before the request was written` };
  }
  if (reply.request !== request.sent) return { refuse: `it answers ${reply.request || 'an unnamed entry'}, not ${request.sent}` };
  return { accept: true };
}
