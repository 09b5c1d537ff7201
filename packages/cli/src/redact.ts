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
 * alone and is hidden whole. Text without a scheme holding an `@` (`:secret@host:6379`, `redis://`
 * forgotten) is hidden up to its last `@`, in every blank-separated word of the text, wherever it
 * stands (a message quotes what was typed in its middle); the quotes or brackets that open the word
 * stay. An e-mail address is hidden the same way: more is hidden, never less.
 *
 * @example redactUrl('redis://:S3cr@tPassw0rd@host:6379') // 'redis://:***@host:6379'
 * @example redactUrl("argument ':S3cret@host:6379' is invalid") // "argument '***@host:6379' is invalid"
 */
export function redactUrl(text: string): string {
  return text.replace(WORD, redactWord);
}

/** A word: the URLs in it as above; what comes before its first URL, when it holds an `@`, hidden up to that `@`. */
function redactWord(word: string): string {
  const scheme = SCHEME.exec(word);
  const head = scheme ? word.slice(0, scheme.index) : word;
  const urls = scheme ? word.slice(scheme.index) : '';
  return hiddenToLastAt(head) + urls.replace(URL_TOKEN, hiddenUserinfo);
}

function hiddenUserinfo(token: string, scheme: string, rest: string): string {
  const at = rest.lastIndexOf('@');
  return at < 0 ? token : `${scheme}${hidden(rest.slice(0, at))}${rest.slice(at)}`;
}

/** Scheme-less text with an `@`: everything up to its last `@` may be a password (`:pw@host`, `user:pw@host`). */
function hiddenToLastAt(text: string): string {
  const at = text.lastIndexOf('@');
  if (at < 0) return text;
  const opening = /^['"`([{<]*/.exec(text)![0];
  return `${opening}***${text.slice(at)}`;
}

/** A comma-separated list of URLs or host:port items (`--cluster`), each redacted alone. */
export function redactUrlList(list: string): string {
  return list
    .split(',')
    .map((item) => redactUrl(item))
    .join(',');
}

const SCHEME = /[a-z][a-z0-9+.-]*:\/\//i;
/** A blank-separated word of a text: a password never holds a blank unencoded (a URL cannot carry one). */
const WORD = /\S+/g;
/** A URL in a text: its scheme, then the rest up to a blank or to a comma that starts the next URL (a --cluster list). */
const URL_TOKEN = /([a-z][a-z0-9+.-]*:\/\/)((?:(?!,[a-z][a-z0-9+.-]*:\/\/)\S)*)/gi;

function hidden(userinfo: string): string {
  const colon = userinfo.indexOf(':');
  return colon < 0 ? '***' : `${userinfo.slice(0, colon)}:***`;
}
