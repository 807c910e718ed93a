/**
 * A stored notebook as Lab's notebook model takes it.
 *
 * nbformat may store a multiline string as a list of lines (the cells' `source`,
 * a stream's `text`, an output's text-like MIME data), and nbcast serves an executed
 * notebook exactly as stored (it is also the download). Lab's model joins a cell's
 * source but hands output data to the renderers as it is, and a list drawn as text
 * is its items joined by commas: a line of commas above every table, a comma below.
 * So lists of lines are joined here, except under JSON MIME types, whose values are
 * JSON data, not split text. Pure: the input is not changed.
 */

type Json = unknown;

const isLines = (value: Json): value is string[] =>
  Array.isArray(value) && value.every(item => typeof item === 'string');

const isJsonMime = (mime: string): boolean => mime === 'application/json' || mime.endsWith('+json');

function joinedData(data: Record<string, Json>): Record<string, Json> {
  const out: Record<string, Json> = {};
  for (const [mime, value] of Object.entries(data)) {
    out[mime] = !isJsonMime(mime) && isLines(value) ? value.join('') : value;
  }
  return out;
}

function joinedOutput(output: Record<string, Json>): Record<string, Json> {
  const out: Record<string, Json> = { ...output };
  if (isLines(out.text)) {
    out.text = out.text.join('');
  }
  if (out.data && typeof out.data === 'object' && !Array.isArray(out.data)) {
    out.data = joinedData(out.data as Record<string, Json>);
  }
  return out;
}

/** `notebook` with its lists of lines joined (module doc). */
export function joinedNotebook(notebook: Json): Json {
  if (!notebook || typeof notebook !== 'object' || Array.isArray(notebook)) {
    return notebook;
  }
  const nb = notebook as Record<string, Json>;
  if (!Array.isArray(nb.cells)) {
    return notebook;
  }
  const cells = nb.cells.map(cell => {
    if (!cell || typeof cell !== 'object') {
      return cell;
    }
    const c: Record<string, Json> = { ...(cell as Record<string, Json>) };
    if (isLines(c.source)) {
      c.source = c.source.join('');
    }
    if (Array.isArray(c.outputs)) {
      c.outputs = c.outputs.map(o =>
        o && typeof o === 'object' && !Array.isArray(o) ? joinedOutput(o as Record<string, Json>) : o
      );
    }
    return c;
  });
  return { ...nb, cells };
}
