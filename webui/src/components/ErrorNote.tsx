export function ErrorNote(props: { error: Error | undefined; what: string }) {
  if (!props.error) return null;
  return (
    <p class="error-note" role="alert">
      Could not load {props.what}: {props.error.message}
    </p>
  );
}
