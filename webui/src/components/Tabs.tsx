/** A row of tabs (ARIA tablist); arrow keys move between them. */
export function Tabs(props: {
  tabs: { id: string; label: string }[];
  selected: string;
  onSelect: (id: string) => void;
  label: string;
}) {
  const onKeyDown = (event: KeyboardEvent) => {
    const index = props.tabs.findIndex((t) => t.id === props.selected);
    const step = event.key === "ArrowRight" ? 1 : event.key === "ArrowLeft" ? -1 : 0;
    if (!step) return;
    event.preventDefault();
    const next = props.tabs[(index + step + props.tabs.length) % props.tabs.length];
    props.onSelect(next.id);
    document.getElementById(`tab-${next.id}`)?.focus();
  };
  return (
    <div class="tabs" role="tablist" aria-label={props.label} onKeyDown={onKeyDown}>
      {props.tabs.map((t) => (
        <button
          key={t.id}
          id={`tab-${t.id}`}
          type="button"
          role="tab"
          aria-selected={t.id === props.selected}
          aria-controls={`panel-${t.id}`}
          tabIndex={t.id === props.selected ? 0 : -1}
          onClick={() => props.onSelect(t.id)}
        >
          {t.label}
        </button>
      ))}
    </div>
  );
}
