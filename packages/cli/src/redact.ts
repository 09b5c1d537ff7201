/**
 * Hides the credentials of every URL in a text the CLI prints (an error, a usage message, JSON):
 * docs/operations.md promises that a password never reaches the terminal or a log. One function
 * for every place, so no message can forget it.
 *
 * A URL's userinfo is everything between `scheme://` and the last `@` of the URL: a password may
 * hold `@`, `:` and `/`, and the URL parser, which ends the authority at the first `/`, reads
 * `redis://u:p@ss/w:rd@host` as host `ss` and would print `w:rd`. Where a URL is unambiguous this
 * is the parser's userinfo; where it is not, more is hidden, never less. The user name stays (it
 * says who failed to log in), the password becomes `***`; userinfo without a `:` may be a password
 * alone and is hidden whole. A scheme-less token with an `@` (`:secret@host:6379`, `redis://`
 * forgotten) is hidden up to its last `@`.
 *
 * @example redactUrl('redis://:S3cr@tPassw0rd@host:6379') // 'redis://:***@host:6379'
 */
export function redactUrl(text: string): string {
  if (!SCHEME.test(text)) return /^\S*@\S*$/.test(text) ? `***${text.slice(text.lastIndexOf('@'))}` : text;
  return text.replace(URL_TOKEN, (token: string, scheme: string, rest: string) => {
    const at = rest.lastIndexOf('@');
    return at < 0 ? token : `${scheme}${hidden(rest.slice(0, at))}${rest.slice(at)}`;
  });
}

/** A comma-separated list of URLs or host:port items (`--cluster`), each redacted alone. */
export function redactUrlList(list: string): string {
  return list
    .split(',')
    .map((item) => redactUrl(item))
    .join(',');
}

const SCHEME = /[a-z][a-z0-9+.-]*:\/\//i;
/** A URL in a text: its scheme, then the rest up to a blank or to a comma that starts the next URL (a --cluster list). */
const URL_TOKEN = /([a-z][a-z0-9+.-]*:\/\/)((?:(?!,[a-z][a-z0-9+.-]*:\/\/)\S)*)/gi;

function hidden(userinfo: string): string {
  const colon = userinfo.indexOf(':');
  return colon < 0 ? '***' : `${userinfo.slice(0, colon)}:***`;
}
