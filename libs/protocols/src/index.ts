export * from './load.ts';
export * from './json.ts';
export * from './openshell-types.ts';
export * from './sandgate-types.ts';
export * from './contract.ts';
export * from './struct.ts';
