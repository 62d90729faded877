import { stateKind, stateLabel } from "../format";

export function StateBadge(props: { state: string }) {
  return <span class={`badge badge-${stateKind(props.state)}`}>{stateLabel(props.state)}</span>;
}
