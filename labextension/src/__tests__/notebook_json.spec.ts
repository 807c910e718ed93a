import { joinedNotebook } from '../notebook_json';

const stored = {
  nbformat: 4,
  nbformat_minor: 5,
  metadata: {},
  cells: [
    {
      cell_type: 'code',
      source: ['import pandas as pd\n', 'df'],
      outputs: [
        { output_type: 'stream', name: 'stdout', text: ['a\n', 'b\n'] },
        {
          output_type: 'execute_result',
          execution_count: 1,
          metadata: {},
          data: {
            'text/html': ['<table>\n', '<tr><td>1</td></tr>\n', '</table>'],
            'text/plain': ['   x\n', '0  1'],
            'application/json': ['a', 'b'],
            'application/vnd.nbcast.table+json': ['kept', 'as data']
          }
        }
      ]
    },
    { cell_type: 'markdown', source: 'already joined', metadata: {} }
  ]
};

describe('joinedNotebook', () => {
  it('joins lists of lines in sources, streams and text-like outputs', () => {
    const nb = joinedNotebook(stored) as any;
    expect(nb.cells[0].source).toBe('import pandas as pd\ndf');
    expect(nb.cells[0].outputs[0].text).toBe('a\nb\n');
    const data = nb.cells[0].outputs[1].data;
    expect(data['text/html']).toBe('<table>\n<tr><td>1</td></tr>\n</table>');
    expect(data['text/html']).not.toContain(',');
    expect(data['text/plain']).toBe('   x\n0  1');
    expect(nb.cells[1].source).toBe('already joined');
  });

  it('leaves JSON MIME data as data and does not change its input', () => {
    const nb = joinedNotebook(stored) as any;
    expect(nb.cells[0].outputs[1].data['application/json']).toEqual(['a', 'b']);
    expect(nb.cells[0].outputs[1].data['application/vnd.nbcast.table+json']).toEqual([
      'kept',
      'as data'
    ]);
    expect(stored.cells[0].source).toEqual(['import pandas as pd\n', 'df']);
  });

  it('passes anything that is not a notebook through', () => {
    expect(joinedNotebook(null)).toBeNull();
    expect(joinedNotebook([1, 2])).toEqual([1, 2]);
    expect(joinedNotebook({ cells: 'no' })).toEqual({ cells: 'no' });
  });
});
