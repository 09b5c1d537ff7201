import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * Headers on every answer: the page loads only its own script and style (so even markup that got
 * into the page could not run a script), is never framed, and data is never cached.
 */
export const SECURITY_HEADERS: Record<string, string> = {
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
  'x-frame-options': 'DENY',
  'cache-control': 'no-store',
};

/** An error a request caused, with the status to answer. */
export class DashboardHttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = 'DashboardHttpError';
  }
}

export function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  response.writeHead(status, {
    ...SECURITY_HEADERS,
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(text),
  });
  response.end(text);
}

export function sendError(response: ServerResponse, status: number, message: string): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  sendJson(response, status, { error: message });
}

const MAX_BODY = 16 * 1024;

/**
 * The JSON body of an action. A framework may already have parsed it (Express' json parser sets
 * `request.body`); otherwise it is read here, at most 16 KiB.
 */
export async function readJsonBody(request: IncomingMessage & { body?: unknown }): Promise<Record<string, unknown>> {
  const type = request.headers['content-type'] ?? '';
  // A form or text/plain body is what a cross-site form sends without a preflight: refused.
  if (!/^application\/json\b/i.test(type)) throw new DashboardHttpError(415, `actions take application/json, got ${JSON.stringify(type)}`);
  if (request.body !== undefined && typeof request.body === 'object' && request.body !== null && !Buffer.isBuffer(request.body)) {
    return request.body as Record<string, unknown>;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new DashboardHttpError(413, `the body is larger than ${MAX_BODY} bytes`);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString('utf8');
  if (text.trim() === '') return {};
  try {
    const parsed = JSON.parse(text) as unknown;
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new Error('not an object');
    return parsed as Record<string, unknown>;
  } catch {
    throw new DashboardHttpError(400, 'the body must be a JSON object');
  }
}
