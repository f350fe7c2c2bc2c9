/* probe_text.c: the built-in probe texts of the load check
 * (probe_text.h): sentences and a few passages written for this purpose,
 * unlike the calibration sentences (calib_text.c) and unlike STS-B, which
 * the precision report measures on: short and long, plain and technical,
 * numbers, code, lists, non-English words and punctuation runs, so that
 * activations of every range go through each GEMM. */
#include "engine/text/probe_text.h"

const char *const mt_probe_texts[] = {
    "A man is playing a guitar on a street corner.",
    "The bakery on Elm Street opens at six and sells out of croissants by nine.",
    "Is there a direct train from the airport to the city centre after midnight?",
    "Profits fell 7.5% in the third quarter, to $1.9 billion, on weaker demand in Europe.",
    "Two dogs are running through a field of tall grass.",
    "The server returned HTTP 503 because every worker was busy.",
    "She has lived in Lisbon, Nairobi and Osaka, and speaks four languages.",
    "Turn the knob clockwise until the indicator light turns green, then release it.",
    "Why do cats purr when they are content, and sometimes when they are hurt?",
    "The orchestra rehearsed the second movement three times before the concert.",
    "for (int i = 0; i < n; i++) sum += a[i] * b[i];",
    "Wind speeds of 120 km/h were recorded on the coast overnight.",
    "Der Zug nach Berlin hat zwanzig Minuten Verspätung.",
    "Please find attached the signed contract and the invoice for March.",
    "A child is drawing a house with a red roof and a yellow sun.",
    "The vaccine was 94% effective at preventing severe illness in the trial.",
    "!!! ??? ... --- *** ### @@@",
    "Refunds are issued within 14 business days of receiving the returned item.",
    "The telescope captured an image of a galaxy more than ten billion light years away.",
    "He missed the last bus, so he walked home in the rain.",
    "Ingredients: 200 g flour, 2 eggs, 300 ml milk, a pinch of salt, butter for the pan.",
    "The defender slipped, and the striker scored from a narrow angle in stoppage time.",
    "Our quarterly roadmap prioritises search latency, billing fixes and the new "
    "onboarding flow for small teams.",
    "The river had risen overnight, and by morning the low fields near the mill were "
    "under water. Farmers moved their cattle to the hills while volunteers filled "
    "sandbags outside the church, and the council opened the school gym for families "
    "who could not stay at home. By the evening the water had begun to fall, but the "
    "road to the village stayed closed for three more days.",
    "To configure the service, copy the example file to /etc/app/config.yaml, set the "
    "listen address and the path to the model, and restart it with systemctl restart "
    "app. Check the logs with journalctl -u app if it fails to start, and make sure the "
    "port is not already in use by another process.",
    "In the early nineteenth century the town grew quickly around its textile mills, "
    "which drew workers from the surrounding countryside and from abroad. Rows of "
    "narrow brick houses were built along the canal, and a railway station followed in "
    "1846. When the mills closed in the 1970s, many families left, and the empty "
    "buildings were later turned into flats, studios and a museum of industry.",
    "What is the difference between a virus and a bacterium, and why do antibiotics "
    "only work against one of them?",
    "Grandmother kept every letter in a tin box under the stairs.",
    "The API accepts a list of strings and returns one vector per string, in order.",
    "Sunflowers turn to follow the sun while they are young.",
    "Le musée est fermé le lundi et ouvert jusqu'à vingt heures le jeudi.",
    "Error: cannot open shared object file: No such file or directory",
};

const int mt_probe_texts_n = (int)(sizeof mt_probe_texts / sizeof *mt_probe_texts);
