import { inboxKey } from './reply-protocol';

/** A client id and a correlation id are UUIDs (CoordinatorClientProxy makes them with uuidv7). */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** How much of a refused header a message quotes: a header is the sender's to make as long as it likes. */
const QUOTED_CHARS = 120;

/**
 * Why a request's reply address is refused, or undefined when it may be written to. The reply-to
 * header becomes the key of an `XADD … MAXLEN ~`, a command that writes and trims, so it is used
 * only when it is exactly an inbox of this transport under this key prefix (SPEC 10.4): any other
 * key (another stream's shard, a coordinator key) would get replies appended and be trimmed.
 */
export function replyAddressRefusal(keyPrefix: string, replyTo: string | undefined, correlationId: string | undefined): string | undefined {
  if (replyTo === undefined) return 'it has no rsc-reply-to header';
  const prefix = inboxKey(keyPrefix, '');
  const clientId = replyTo.startsWith(prefix.slice(0, -1)) && replyTo.endsWith('}') ? replyTo.slice(prefix.length - 1, -1) : '';
  if (!UUID.test(clientId) || replyTo !== inboxKey(keyPrefix, clientId)) {
    return `its rsc-reply-to ${quote(replyTo)} is not a reply inbox of this transport (${inboxKey(keyPrefix, '<client uuid>')})`;
  }
  if (correlationId === undefined || !UUID.test(correlationId)) {
    return `its rsc-correlation-id ${correlationId === undefined ? 'is missing' : `${quote(correlationId)} is not a UUID`}`;
  }
  return undefined;
}

function quote(value: string): string {
  return JSON.stringify(value.length > QUOTED_CHARS ? `${value.slice(0, QUOTED_CHARS)}…` : value);
}
