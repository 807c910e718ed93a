// The form logic (src/form/*) is pure TypeScript with no Lab import, so its unit tests
// run in node through ts-jest; the widgets are tested in a real Lab (tests/labextension).
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src'],
  testRegex: 'src/.*/.*\\.spec\\.ts$',
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: './tsconfig.test.json' }] },
  reporters: ['default']
};
